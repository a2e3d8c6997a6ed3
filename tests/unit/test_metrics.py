"""The metrics sinks without services: the OTel -> Prometheus names are the contract the
dashboard queries (tests/unit/test_k8s_manifests.py METRICS), every series carries `service`,
and each service's sink turns its plain stats into the right counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_k8s_manifests import METRICS

from drafter_service import metrics as drafter_metrics
from orchestrator import metrics as orchestrator_metrics
from specmesh.stats import StepStats
from specmesh.telemetry.metrics import PROMETHEUS, Metrics
from verifier_service import metrics as verifier_metrics


def scrape(metrics: Metrics) -> dict[str, list]:
    """Prometheus name (as queried: counters with _total) -> its samples."""
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    families = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name != "target_info":
            families[family.name + ("_total" if family.type == "counter" else "")] = family
    return families


def value(families, name: str, suffix: str = "", **labels) -> float:
    return sum(s.value for s in families[name].samples if s.name == name + suffix and labels.items() <= s.labels.items())


def steps(budget: int, tree: int, accepted: int, draft_s: float = 0.002) -> StepStats:
    return StepStats(tree, accepted, 1, draft_s, 0.03, budget)


def test_the_exported_names_and_types_are_the_contract():
    metrics = Metrics("verifier")
    metrics.goodput_tokens.add(3, "v:1")
    metrics.acceptance_by_depth.add(1, 1)
    metrics.wasted_draft_tokens.add(2)
    metrics.draft_sessions.add(1, "data_plane")
    for histogram in (metrics.accepted_tokens_per_step, metrics.ttft, metrics.tpot, metrics.e2e_latency,
                      metrics.drafter_latency, metrics.budget):
        histogram.record(1)
    for gauge in ("queue_depth", "active_sessions", "kv_slots_used"):
        metrics.gauge(gauge, lambda: 0)
    families = scrape(metrics)
    assert PROMETHEUS == METRICS
    assert {name: family.type for name, family in families.items()} == METRICS
    for family in families.values():
        assert all(sample.labels["service"] == "verifier" for sample in family.samples), family.name
    assert value(families, "specmesh_goodput_tokens_total", verifier="v:1") == 3


def test_unknown_services_are_refused():
    with pytest.raises(ValueError, match="service"):
        Metrics("gateway")


def test_the_verifier_counts_goodput_acceptance_and_waste_per_step():
    metrics = Metrics("verifier")
    loop = SimpleNamespace(sessions={"a": 1, "b": 2}, waiting=["c"])
    sink = verifier_metrics.VerifierMetrics(metrics, "10.0.0.1:50061", loop, SimpleNamespace(free_slots=5), 8)
    session = SimpleNamespace(spec=SimpleNamespace(drafter_method="recycling"))
    sink.step(session, steps(8, 8, 3), 4)
    sink.step(session, steps(8, 6, 0), 1)
    sink.step(session, steps(0, 0, 0, draft_s=0.0), 1)  # no speculation: no tree, no drafter wait
    sink.step(session, steps(8, 8, 5), 2)  # cut at max_new_tokens: 2 of 6 tokens delivered
    families = scrape(metrics)
    assert value(families, "specmesh_goodput_tokens_total", verifier="10.0.0.1:50061") == 4 + 1 + 1 + 2
    assert value(families, "specmesh_accepted_tokens_per_step", "_count") == 4
    assert value(families, "specmesh_accepted_tokens_per_step", "_sum") == 8
    by_depth = {int(s.labels["depth"]): s.value for s in families["specmesh_acceptance_by_depth_total"].samples}
    assert by_depth == {1: 2, 2: 2, 3: 2, 4: 1, 5: 1}
    assert value(families, "specmesh_wasted_draft_tokens_total") == 5 + 6 + 3
    assert value(families, "specmesh_drafter_latency_seconds", "_count", method="recycling") == 3
    assert value(families, "specmesh_active_sessions") == 2
    assert value(families, "specmesh_queue_depth") == 1
    assert value(families, "specmesh_kv_slots_used") == 3


def test_the_orchestrator_times_requests_and_counts_steps(monkeypatch):
    metrics = Metrics("orchestrator")
    waiting, running = SimpleNamespace(verifier=""), SimpleNamespace(verifier="v:1")
    sink = orchestrator_metrics.OrchestratorMetrics(metrics, SimpleNamespace(active={"a": waiting, "b": running}))
    sink.step("v:1", 3, [8, 4])  # an event of two steps (coalesced)
    sink.step("v:2", 1, [0])
    monkeypatch.setattr(orchestrator_metrics.time, "monotonic", lambda: 10.0)
    sink.request_ended(SimpleNamespace(started=4.0, first_token_at=6.0, tokens=[1] * 5), "finished")
    sink.request_ended(SimpleNamespace(started=8.0, first_token_at=9.0, tokens=[1]), "cancelled")
    sink.request_ended(SimpleNamespace(started=9.0, first_token_at=None, tokens=[]), "failed")
    families = scrape(metrics)
    assert value(families, "specmesh_goodput_tokens_total", verifier="v:1") == 3
    assert value(families, "specmesh_goodput_tokens_total", verifier="v:2") == 1
    assert value(families, "specmesh_budget", "_count") == 3 and value(families, "specmesh_budget", "_sum") == 12
    assert value(families, "specmesh_ttft_seconds", "_count") == 2 and value(families, "specmesh_ttft_seconds", "_sum") == 3
    assert value(families, "specmesh_e2e_latency_seconds", "_sum") == 6  # finished requests only
    assert value(families, "specmesh_tpot_seconds", "_count") == 1
    assert value(families, "specmesh_tpot_seconds", "_sum") == pytest.approx((10.0 - 6.0) / 4)
    assert value(families, "specmesh_active_sessions") == 2 and value(families, "specmesh_queue_depth") == 1


def test_the_drafter_records_proposal_times_only_once_set_up():
    drafter_metrics.proposal("ngram", 0.5)  # metrics off (no setup): a no-op
    drafter_metrics.session_begun("grpc")
    metrics = Metrics("drafter")
    drafter_metrics._sink = drafter_metrics.DrafterMetrics(metrics, SimpleNamespace(sessions={}))
    try:
        drafter_metrics.proposal("ngram", 0.25)
        drafter_metrics.proposal("ngram", 0.5)
    finally:
        drafter_metrics._sink = None
    families = scrape(metrics)
    assert value(families, "specmesh_drafter_latency_seconds", "_count", method="ngram") == 2
    assert value(families, "specmesh_drafter_latency_seconds", "_sum", method="ngram") == 0.75
