"""The server's counters in Prometheus' text format (`GET /metrics`): requests by path and status, their latency
as a histogram, the audio transcribed, how many requests wait for each model and how many were batched together."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # seconds


@dataclass
class Metrics:
    requests: Counter = field(default_factory=Counter)  # (path, status) → count
    latency_buckets: Counter = field(default_factory=Counter)  # upper bound → requests at or below it
    latency_sum: float = 0.0
    latency_count: int = 0
    audio_seconds: float = 0.0
    waiting: dict = field(default_factory=dict)  # model → requests waiting for it
    batches: Counter = field(default_factory=Counter)  # requests decoded together → how many times

    def request(self, path: str, status: int, seconds: float) -> None:
        self.requests[(path, status)] += 1
        self.latency_sum += seconds
        self.latency_count += 1
        for bound in LATENCY_BUCKETS:
            if seconds <= bound:
                self.latency_buckets[bound] += 1

    def batch(self, size: int) -> None:
        self.batches[size] += 1

    def queue_depth(self, model: str, waiting: int) -> None:
        self.waiting[model] = waiting

    def text(self) -> str:
        lines = ["# HELP asr_requests_total Requests answered, by path and HTTP status.",
                 "# TYPE asr_requests_total counter"]
        lines += [f'asr_requests_total{{path="{p}",status="{s}"}} {n}' for (p, s), n in sorted(self.requests.items())]
        lines += ["# HELP asr_request_seconds Time from a request's arrival to its answer.",
                  "# TYPE asr_request_seconds histogram"]
        lines += [f'asr_request_seconds_bucket{{le="{b:g}"}} {self.latency_buckets[b]}' for b in LATENCY_BUCKETS]
        lines += [f'asr_request_seconds_bucket{{le="+Inf"}} {self.latency_count}',
                  f"asr_request_seconds_sum {self.latency_sum:.6f}", f"asr_request_seconds_count {self.latency_count}",
                  "# HELP asr_audio_seconds_total Seconds of audio transcribed.",
                  "# TYPE asr_audio_seconds_total counter", f"asr_audio_seconds_total {self.audio_seconds:.3f}",
                  "# HELP asr_queue_depth Requests waiting for or being decoded by each model.",
                  "# TYPE asr_queue_depth gauge"]
        lines += [f'asr_queue_depth{{model="{m}"}} {n}' for m, n in sorted(self.waiting.items())]
        lines += ["# HELP asr_batches_total Batches of requests decoded together, by how many requests.",
                  "# TYPE asr_batches_total counter"]
        lines += [f'asr_batches_total{{requests="{n}"}} {c}' for n, c in sorted(self.batches.items())]
        return "\n".join(lines) + "\n"
