"""`asr join`: consecutive utterances of one speaker become one example, no longer than asked, each utterance in
exactly one example, never a sentence joined with another take of itself; the audio is theirs with the gap."""

import numpy as np
import soundfile as sf

from asr_transformer.data.audio import load_audio
from asr_transformer.data.joining import join_manifest, plan_examples
from asr_transformer.data.manifest import Utterance, read_manifest, write_manifest


def _utts(tmp_path, specs):
    """Utterances from (speaker, text, seconds); each a WAV of a constant level unique to it."""
    utts = []
    for i, (speaker, text, seconds) in enumerate(specs):
        path = tmp_path / f"u{i}.wav"
        sf.write(path, np.full(int(seconds * 16000), (i + 1) / 100, dtype=np.float32), 16000, subtype="PCM_16")
        utts.append(Utterance(f"u{i}", str(path), seconds, text, speaker))
    return utts


def test_examples_keep_order_speakers_and_length_and_skip_second_takes(tmp_path):
    specs = [("a", f"sentence {i % 7}", 2.0 + i % 3) for i in range(30)] + [("b", "other voice", 2.0)]
    utts = _utts(tmp_path, specs)
    groups = plan_examples(utts, 5.0, 12.0, 0.5, seed=3)
    assert sorted(u.id for g in groups for u in g) == sorted(u.id for u in utts)
    for group in groups:
        assert len({u.speaker for u in group}) == 1
        assert len({u.text for u in group}) == len(group)  # no sentence twice in one example
        length = sum(u.duration for u in group) + 0.5 * (len(group) - 1)
        assert length <= 12.0 or len(group) == 1
        first = [u.id for u in utts if u.text == group[0].text].index(group[0].id)  # which take
        assert all([u.id for u in utts if u.text == x.text].index(x.id) == first for x in group)
    assert max(len(g) for g in groups) > 1


def test_shuffled_words_join_in_a_new_order_within_each_speaker(tmp_path):
    """--shuffle: digits listed in order ("zero" … "nine" for each speaker) are joined in a random order that the
    seed fixes, each utterance once, each example one speaker's."""
    specs = [(speaker, word, 0.5) for speaker in "ab" for word in ["zero", "one", "two", "three", "four"] * 4]
    utts = _utts(tmp_path, specs)
    texts = lambda groups: [" ".join(u.text for u in g) for g in groups]  # noqa: E731
    plain = plan_examples(utts, 3.0, 3.0, 0.1)
    shuffled = plan_examples(utts, 3.0, 3.0, 0.1, seed=1, shuffle=True)
    assert set(texts(plain)) == {"zero one two three four"}  # in order, every example the same sequence
    assert len(set(texts(shuffled))) > 1
    assert shuffled == plan_examples(utts, 3.0, 3.0, 0.1, seed=1, shuffle=True)
    assert sorted(u.id for g in shuffled for u in g) == sorted(u.id for u in utts)
    assert all(len({u.speaker for u in g}) == 1 for g in shuffled)


def test_joined_audio_and_text(tmp_path):
    utts = _utts(tmp_path, [("a", "One.", 1.0), ("a", "Two.", 1.5), ("a", "Three.", 1.0)])
    write_manifest(tmp_path / "in.jsonl", utts)
    assert join_manifest(tmp_path / "in.jsonl", tmp_path / "out.jsonl", 3.5, 3.5, gap_seconds=0.25) == 2
    first, second = read_manifest(tmp_path / "out.jsonl")
    assert (first.id, first.text, first.duration) == ("u0+1", "One. Two.", 2.75)
    assert (second.id, second.text) == ("u2", "Three.")
    samples = load_audio(first.audio)
    expected = np.concatenate([np.full(16000, 0.01), np.zeros(4000), np.full(24000, 0.02)])
    assert samples.shape == expected.shape and np.abs(samples - expected).max() < 1e-3
