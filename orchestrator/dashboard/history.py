"""What the ops dashboard charts: the requests this orchestrator saw end, kept in memory (pure:
no I/O, no clock of its own; times are Unix seconds passed in).

Glossary:
- entry: one request as the dashboard shows it (RequestEntry): id, status, drafter, tokens,
  steps, accepted tokens, TTFT, TPOT and end-to-end latency; built from a driver's stats dict.
- ring: the newest `capacity` ended requests, by id and in order of their end.
- bucket: `bucket_s` seconds of wall-clock time. An ended request spreads its generated tokens,
  steps and accepted tokens evenly over the buckets of its decoding time (first token → end),
  so goodput (generated tokens/s) reads as a rate rather than spikes at each end; its latencies
  go to the bucket it ended in. Buckets older than `span_s` are dropped.
- latency: as the orchestrator's metrics (metrics.py): TTFT for every request that got a token,
  TPOT and end-to-end latency for finished ones; p50 / p99 by linear interpolation (numpy's
  default percentile).
- accepted per step: draft tokens accepted per verification step (the bonus token not counted).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

LATENCIES = ("ttft_s", "tpot_s", "latency_s")


@dataclass(frozen=True)
class RequestEntry:
    request_id: str
    status: str  # running | finished | cancelled | failed
    reason: str  # the finish reason (stop, length, ...) or why it failed
    method: str  # the drafter method (recycling, ngram, eagle, hybrid, none)
    drafter: str  # the drafter's address ("" without one)
    verifier: str
    started_at: float  # admission, Unix s
    ended_at: float | None  # None while running
    prompt_tokens: int
    generated_tokens: int
    steps: int
    accepted_tokens: int
    failovers: int
    ttft_s: float | None  # None before the first token
    tpot_s: float | None  # finished with 2 tokens or more
    latency_s: float | None  # finished only

    @property
    def accepted_per_step(self) -> float | None:
        return self.accepted_tokens / self.steps if self.steps else None

    def to_json(self) -> dict:
        return asdict(self) | {"accepted_per_step": self.accepted_per_step}


def entry_from_stats(request_id: str, status: str, reason: str, method: str, stats: dict, now: float) -> RequestEntry:
    """An entry from a driver's stats (driver.py: RequestDriver.stats) at `now`."""
    total_s, tokens = stats["total_ms"] / 1000, stats["generated_tokens"]
    ttft = stats["ttft_ms"] / 1000 if tokens else None
    done = status == "finished"
    tpot = (total_s - ttft) / (tokens - 1) if done and tokens > 1 else None
    return RequestEntry(
        request_id, status, reason, method, stats["drafter"], stats["verifier"], now - total_s,
        None if status == "running" else now, stats["prompt_tokens"], tokens, stats["steps"],
        stats["accepted_tokens"], stats["failovers"], ttft, tpot, total_s if done else None,
    )


def entry_from_record(request_id: str, fields: dict[str, str], prompt_tokens: int, generated_tokens: int) -> RequestEntry:
    """An entry from a request's Redis record (specmesh/store/requests.py), for a request that
    another orchestrator replica ran; its timestamps are Unix ms."""
    def seconds(name: str) -> float | None:
        return int(fields[name]) / 1000 if fields.get(name) else None

    started, first, ended = seconds("created_ms"), seconds("first_token_ms"), seconds("finished_ms")
    status = fields.get("status", "")
    done = status == "finished" and None not in (started, ended)
    ttft = first - started if None not in (started, first) else None
    tpot = (ended - first) / (generated_tokens - 1) if done and first is not None and generated_tokens > 1 else None
    return RequestEntry(
        request_id, status, fields.get("finish_reason", ""), fields.get("drafter", ""),
        fields.get("drafter_address", ""), fields.get("verifier", ""), started or 0.0, ended, prompt_tokens,
        generated_tokens, int(fields.get("steps", 0)), int(fields.get("accepted", 0)), int(fields.get("failovers", 0)),
        ttft, tpot, ended - started if done else None,
    )


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Bucket:
    tokens: float = 0.0
    steps: float = 0.0
    accepted: float = 0.0
    ended: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in LATENCIES})


def _latency_stats(latencies: dict[str, list[float]]) -> dict:
    return {name: {"p50": percentile(v, 50), "p99": percentile(v, 99)} for name, v in latencies.items()}


class History:
    def __init__(self, capacity: int = 1000, bucket_s: float = 1.0, span_s: float = 600.0):
        if capacity < 1 or bucket_s <= 0 or span_s < bucket_s:
            raise ValueError("need capacity >= 1 and 0 < bucket_s <= span_s")
        self.capacity, self.bucket_s, self.span_s = capacity, bucket_s, span_s
        self._ring: OrderedDict[str, RequestEntry] = OrderedDict()
        self._buckets: dict[int, Bucket] = {}

    def add(self, entry: RequestEntry) -> None:
        """Record an ended request (`ended_at` set)."""
        self._ring.pop(entry.request_id, None)
        self._ring[entry.request_id] = entry
        if len(self._ring) > self.capacity:
            self._ring.popitem(last=False)
        self._spread(entry)
        end = self._bucket(entry.ended_at)
        end.ended += 1
        for name in LATENCIES:
            if getattr(entry, name) is not None:
                end.latencies[name].append(getattr(entry, name))
        self._prune(entry.ended_at)

    def get(self, request_id: str) -> RequestEntry | None:
        return self._ring.get(request_id)

    def recent(self, limit: int) -> list[RequestEntry]:
        """The `limit` newest ended requests, newest first."""
        return list(reversed(self._ring.values()))[:limit]

    def summary(self, now: float, window_s: float) -> dict:
        """Headline numbers over the whole buckets of the last `window_s` seconds (the one `now`
        is in is still filling, so it is left out), and the series for the charts."""
        indexes = range(self._index(now - window_s), self._index(now))
        window = [self._buckets.get(i) or Bucket() for i in indexes]
        merged = {name: [v for b in window for v in b.latencies[name]] for name in LATENCIES}
        steps = sum(b.steps for b in window)
        return {
            "now": now, "window_s": window_s, "bucket_s": self.bucket_s,
            "ended": sum(b.ended for b in window),
            "goodput": sum(b.tokens for b in window) / (len(window) * self.bucket_s),
            "accepted_per_step": sum(b.accepted for b in window) / steps if steps else None,
            "latency": _latency_stats(merged),
            "series": [self._point(i, b) for i, b in zip(indexes, window)],
        }

    def _point(self, index: int, bucket: Bucket) -> dict:
        return {
            "t": index * self.bucket_s, "ended": bucket.ended, "goodput": bucket.tokens / self.bucket_s,
            "accepted_per_step": bucket.accepted / bucket.steps if bucket.steps else None,
            "latency": _latency_stats(bucket.latencies),
        }

    def _spread(self, entry: RequestEntry) -> None:
        """Tokens, steps and accepted tokens over the request's decoding time, by overlap."""
        start = entry.started_at + (entry.ttft_s or 0.0)
        end = max(entry.ended_at, start)
        for index in range(self._index(max(start, end - self.span_s)), self._index(end) + 1):
            low, high = max(start, index * self.bucket_s), min(end, (index + 1) * self.bucket_s)
            share = (high - low) / (end - start) if end > start else 1.0
            bucket = self._bucket(index * self.bucket_s)
            bucket.tokens += entry.generated_tokens * share
            bucket.steps += entry.steps * share
            bucket.accepted += entry.accepted_tokens * share

    def _index(self, t: float) -> int:
        return math.floor(t / self.bucket_s)

    def _bucket(self, t: float) -> Bucket:
        return self._buckets.setdefault(self._index(t), Bucket())

    def _prune(self, now: float) -> None:
        oldest = self._index(now - self.span_s)
        for index in [i for i in self._buckets if i < oldest]:
            del self._buckets[index]
