"""The dashboard's in-memory history (orchestrator/dashboard/history.py) and its span filter
(traces.py). Oracles: numpy's percentile, token conservation across buckets, hand-made traces."""

from __future__ import annotations

import random

import numpy as np
import pytest

from orchestrator.dashboard.history import History, RequestEntry, entry_from_record, entry_from_stats, percentile
from orchestrator.dashboard.traces import request_spans

T0 = 1_700_000_000.0  # a bucket boundary


def entry(request_id: str, ended_at: float, latency_s: float = 2.0, ttft_s: float = 0.5, tokens: int = 40,
          steps: int = 10, accepted: int = 20, status: str = "finished") -> RequestEntry:
    tpot = (latency_s - ttft_s) / (tokens - 1)
    return RequestEntry(request_id, status, "length", "recycling", "d:1", "v:1", ended_at - latency_s, ended_at, 12,
                        tokens, steps, accepted, 0, ttft_s, tpot, latency_s)


def test_percentile_matches_numpy():
    rng = random.Random(0)
    for n in (1, 2, 5, 101):
        values = [rng.expovariate(1.0) for _ in range(n)]
        for q in (0, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert percentile([], 50) is None


def test_entry_from_stats_times_as_the_metrics_do():
    stats = {"prompt_tokens": 7, "generated_tokens": 11, "steps": 4, "accepted_tokens": 6, "ttft_ms": 300.0,
             "total_ms": 1300.0, "verifier": "v:1", "drafter": "d:1", "failovers": 1}
    done = entry_from_stats("a", "finished", "length", "ngram", stats, now=T0)
    assert done.started_at == pytest.approx(T0 - 1.3) and done.ended_at == T0
    assert (done.ttft_s, done.latency_s) == (pytest.approx(0.3), pytest.approx(1.3))
    assert done.tpot_s == pytest.approx(1.0 / 10) and done.accepted_per_step == 1.5
    running = entry_from_stats("a", "running", "", "ngram", stats, now=T0)
    assert running.ended_at is None and running.latency_s is None and running.tpot_s is None
    assert running.ttft_s == pytest.approx(0.3)
    silent = entry_from_stats("b", "cancelled", "cancelled", "none", stats | {"generated_tokens": 0, "steps": 0}, now=T0)
    assert silent.ttft_s is None and silent.accepted_per_step is None
    assert set(done.to_json()) >= {"request_id", "status", "ttft_s", "accepted_per_step"}


def test_entry_from_a_redis_record():
    fields = {"status": "finished", "finish_reason": "stop", "drafter": "recycling", "drafter_address": "d:1",
              "verifier": "v:1", "created_ms": "1000000", "first_token_ms": "1000250", "finished_ms": "1001250",
              "steps": "5", "accepted": "9", "failovers": "0"}
    got = entry_from_record("r", fields, prompt_tokens=8, generated_tokens=11)
    assert (got.started_at, got.ended_at, got.ttft_s) == (1000.0, 1001.25, pytest.approx(0.25))
    assert got.latency_s == pytest.approx(1.25) and got.tpot_s == pytest.approx(0.1)
    assert (got.method, got.drafter, got.steps, got.accepted_tokens) == ("recycling", "d:1", 5, 9)
    running = entry_from_record("r", fields | {"status": "running", "finished_ms": ""}, 8, 3)
    assert running.ended_at is None and running.latency_s is None


def test_the_ring_keeps_the_newest_requests():
    history = History(capacity=3)
    for i in range(5):
        history.add(entry(f"r{i}", T0 + i))
    assert [e.request_id for e in history.recent(10)] == ["r4", "r3", "r2"]
    assert history.get("r1") is None and history.get("r3").ended_at == T0 + 3
    assert [e.request_id for e in history.recent(2)] == ["r4", "r3"]


def test_tokens_spread_over_decoding_time_and_are_conserved():
    history = History(bucket_s=1.0)
    # decoding from T0 + 1 (first token) to T0 + 5: 40 tokens, 10 per second
    history.add(entry("a", T0 + 5, latency_s=5.0, ttft_s=1.0, tokens=40, steps=8, accepted=16))
    summary = history.summary(now=T0 + 9.5, window_s=20)
    by_t = {p["t"]: p for p in summary["series"]}
    assert [by_t[T0 + i]["goodput"] for i in range(6)] == pytest.approx([0, 10, 10, 10, 10, 0])
    assert sum(p["goodput"] for p in summary["series"]) == pytest.approx(40)
    assert summary["goodput"] == pytest.approx(40 / 20) and summary["accepted_per_step"] == pytest.approx(2.0)
    assert by_t[T0 + 2]["accepted_per_step"] == pytest.approx(2.0) and by_t[T0 + 6]["accepted_per_step"] is None
    assert by_t[T0 + 5]["ended"] == 1 and by_t[T0 + 5]["latency"]["latency_s"]["p50"] == 5.0


def test_window_percentiles_and_accepted_per_step_equal_a_recomputation():
    rng = random.Random(1)
    history = History(capacity=500, bucket_s=2.0)
    entries = [entry(f"r{i}", T0 + rng.uniform(0, 100), latency_s=rng.uniform(1, 5), ttft_s=rng.uniform(0.1, 0.9),
                     steps=rng.randint(1, 20), accepted=rng.randint(0, 30)) for i in range(200)]
    for e in sorted(entries, key=lambda e: e.ended_at):
        history.add(e)
    now, window = T0 + 100, 30.0
    summary = history.summary(now, window)
    start = np.floor((now - window) / 2.0) * 2.0  # the window's first bucket (the one `now` is in is left out)
    inside = [e for e in entries if e.ended_at >= start]
    assert summary["ended"] == len(inside)
    for name in ("ttft_s", "tpot_s", "latency_s"):
        values = [getattr(e, name) for e in inside]
        assert summary["latency"][name]["p50"] == pytest.approx(np.percentile(values, 50))
        assert summary["latency"][name]["p99"] == pytest.approx(np.percentile(values, 99))
    assert len(summary["series"]) == window / 2.0
    everything = history.summary(now, 200)
    assert everything["accepted_per_step"] == pytest.approx(sum(e.accepted_tokens for e in entries) / sum(e.steps for e in entries))


def test_unfinished_requests_add_no_latency_and_old_buckets_are_dropped():
    history = History(bucket_s=1.0, span_s=60)
    history.add(entry("c", T0, status="cancelled"))
    history.add(RequestEntry("x", "failed", "unavailable", "none", "", "", T0 - 1, T0, 5, 0, 0, 0, 0, None, None, None))
    summary = history.summary(T0 + 1.5, 10)
    assert summary["ended"] == 2 and summary["latency"]["tpot_s"]["p50"] == pytest.approx(1.5 / 39)
    history.add(entry("late", T0 + 120))
    assert history.summary(T0 + 120.5, 60)["ended"] == 0  # its bucket is still filling
    assert history.summary(T0 + 121.5, 60)["ended"] == 1
    assert history.summary(T0 + 121.5, 600)["ended"] == 1  # the early ones' buckets are gone
    with pytest.raises(ValueError):
        History(bucket_s=0)


def span(span_id: str, parent: str | None, name: str, request_id: str | None = None) -> dict:
    attributes = {"request.id": request_id} if request_id else {}
    return {"span_id": span_id, "parent_span_id": parent, "name": name, "attributes": attributes}


def test_request_spans_leave_out_other_requests_of_a_shared_trace():
    spans = [span("a", "caller", "request", "r1"), span("a1", "a", "session"), span("a2", "a1", "step"),
             span("b", "caller", "request", "r2"), span("b1", "b", "session"), span("b2", "b1", "draft"),
             span("c2", "c1", "step")]  # c1 (a session of a running request) is not stored yet
    assert [s["span_id"] for s in request_spans(spans, "r1")] == ["a", "a1", "a2", "c2"]
    assert [s["span_id"] for s in request_spans(spans, "r2")] == ["b", "b1", "b2", "c2"]
