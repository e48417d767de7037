"""OpenAI's transcription API, as its clients read it: the form of a request and the shape of each answer.

`POST /v1/audio/transcriptions` takes a multipart form (`file`, `model`, `language`, `prompt`, `response_format`,
`timestamp_granularities[]`); the answer is `{"text"}` (json), the text alone (text), subtitles (srt, vtt), or
verbose_json: the task, language, duration, text, the segments (id, seek, start, end, text, temperature,
avg_logprob, compression_ratio, no_speech_prob: a Whisper package's or a no-speech head's, else 0) and, when word
granularity is asked, the words with their times. Errors are `{"error": {"message", "type", "param", "code"}}`, as
OpenAI writes them.
"""

from __future__ import annotations

import json

from asr_transformer.decode.fallback import compression_ratio
from asr_transformer.inference.writers import to_srt, to_vtt

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("segment", "word")
CONTENT_TYPES = {"json": "application/json", "verbose_json": "application/json", "text": "text/plain",
                 "srt": "text/plain", "vtt": "text/vtt"}


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def verbose(result: dict, words: bool) -> dict:
    """verbose_json of a transcript (`Recognizer.transcribe`'s dict). avg_logprob: the segment's score over its
    characters (the toolkit scores hypotheses, not tokens one by one), null where it has none."""
    segments = []
    for i, s in enumerate(result.get("segments") or []):
        score = s.get("score")
        segments.append({"id": i, "seek": 0, "start": round(float(s["start"]), 3), "end": round(float(s["end"]), 3),
                         "text": s["text"], "temperature": s.get("temperature", 0.0),
                         "avg_logprob": None if score is None else float(score) / max(1, len(s["text"])),
                         "compression_ratio": compression_ratio(s["text"]),
                         "no_speech_prob": s.get("no_speech_prob", 0.0)})
    body = {"task": "transcribe", "language": "english", "duration": round(float(result.get("duration", 0.0)), 3),
            "text": result.get("text", ""), "segments": segments}
    if words:
        body["words"] = [{"word": w["word"], "start": round(float(w["start"]), 3), "end": round(float(w["end"]), 3)}
                         for s in result.get("segments") or [] for w in s.get("words", [])]
    return body


def render(result: dict, response_format: str, words: bool) -> tuple[str, str]:
    """(body, content type) of a transcript in `response_format` (one of RESPONSE_FORMATS)."""
    if response_format == "json":
        body = json.dumps({"text": result.get("text", "")}, ensure_ascii=False)
    elif response_format == "verbose_json":
        body = json.dumps(verbose(result, words), ensure_ascii=False)
    elif response_format == "text":
        body = result.get("text", "") + "\n"
    elif response_format == "srt":
        body = to_srt(result)
    else:
        body = to_vtt(result)
    return body, CONTENT_TYPES[response_format]
