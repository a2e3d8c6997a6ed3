"""Prometheus metrics through the real stack (bf16 SmolLM2, 1 verifier, 1 recycling drafter):
each service's /metrics, scraped over HTTP before and after a few requests, against what the
requests themselves report."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_stack import start_stack, wait_until

from specmesh.client import Client
from specmesh.datasets import load_prompts
from specmesh.telemetry.metrics import PROMETHEUS
from specmesh.text import TextCodec

pytestmark = pytest.mark.model
MAX_NEW_TOKENS = 24
EXPORTED = {  # which service exports which contract metric
    "orchestrator": {"specmesh_goodput_tokens_total", "specmesh_ttft_seconds", "specmesh_tpot_seconds",
                     "specmesh_e2e_latency_seconds", "specmesh_budget", "specmesh_queue_depth", "specmesh_active_sessions"},
    "verifier": {"specmesh_goodput_tokens_total", "specmesh_accepted_tokens_per_step", "specmesh_acceptance_by_depth_total",
                 "specmesh_wasted_draft_tokens_total", "specmesh_drafter_latency_seconds", "specmesh_queue_depth",
                 "specmesh_active_sessions", "specmesh_kv_slots_used"},
    "drafter": {"specmesh_drafter_latency_seconds", "specmesh_active_sessions", "specmesh_draft_sessions_total"},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_client, default_model_dir):
    stack = start_stack(tmp_path_factory, redis_client, verifiers=1, drafters=1, dtype="bfloat16", drafter="recycling")
    yield stack
    stack.stop()
    stack.forget()


def urls(stack) -> dict[str, str]:
    return {service.name.split("-")[0]: service.metrics_url for service in stack.services}


def scrape(url: str) -> dict[str, list]:
    """Prometheus name (counters with _total, as queried) -> its samples."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {family.name + ("_total" if family.type == "counter" else ""): family.samples
            for family in text_string_to_metric_families(text) if family.name != "target_info"}


def total(families, name: str, suffix: str = "", **labels) -> float:
    wanted = name + suffix
    return sum(s.value for s in families.get(name, []) if s.name == wanted and labels.items() <= s.labels.items())


def scrape_all(stack) -> dict[str, dict]:
    return {service: scrape(url) for service, url in urls(stack).items()}


def idle(stack) -> bool:
    scraped = scrape_all(stack)
    return all(total(families, "specmesh_active_sessions") == 0 for families in scraped.values())


def test_every_service_exports_its_contract_metrics_and_they_add_up(stack, default_model_dir):
    codec = TextCodec.from_dir(default_model_dir)
    prompts = [codec.chat_prompt(p.text) for p in load_prompts("mtbench", 3)]
    before = scrape_all(stack)
    with Client(stack.address, timeout=120) as client:
        results = [client.generate(token_ids=prompt, max_new_tokens=MAX_NEW_TOKENS, budget=budget)
                   for prompt, budget in zip(prompts, (8, -1, 4))]  # -1: the goodput controller's budgets
    wait_until(lambda: idle(stack), timeout_s=15, what="every service's sessions to end")
    after = scrape_all(stack)

    def delta(service: str, name: str, suffix: str = "", **labels) -> float:
        return total(after[service], name, suffix, **labels) - total(before[service], name, suffix, **labels)

    assert set().union(*EXPORTED.values()) == PROMETHEUS.keys()
    for service, names in EXPORTED.items():
        assert names <= after[service].keys(), f"{service} lacks {sorted(names - after[service].keys())}"
        for samples in after[service].values():
            assert all(s.labels["service"] == service for s in samples)

    # goodput: every verification step's tokens as delivered; the first token of a request comes
    # from its prefill, not from a verification step
    verifier = stack.by_name("verifier")[0].address
    produced = sum(len(r.token_ids) - 1 for r in results)
    assert all(len(r.token_ids) == r.stats.generated_tokens > 1 for r in results)
    assert delta("orchestrator", "specmesh_goodput_tokens_total", verifier=verifier) == produced
    assert delta("verifier", "specmesh_goodput_tokens_total", verifier=verifier) == produced
    assert produced <= sum(r.stats.steps + r.stats.accepted_tokens for r in results)  # the last step may be cut

    steps, accepted = sum(r.stats.steps for r in results), sum(r.stats.accepted_tokens for r in results)
    assert delta("verifier", "specmesh_accepted_tokens_per_step", "_count") == steps
    assert delta("verifier", "specmesh_accepted_tokens_per_step", "_sum") == accepted
    # Σ_d (steps accepting ≥ d) = Σ accepted; depth 1 counts the steps that accepted anything
    assert delta("verifier", "specmesh_acceptance_by_depth_total") == accepted
    assert 0 < delta("verifier", "specmesh_acceptance_by_depth_total", depth="1") <= steps
    assert delta("verifier", "specmesh_wasted_draft_tokens_total") > 0

    # each session that speculated reached the drafter on its data plane, none on the gRPC stream
    assert 2 <= delta("drafter", "specmesh_draft_sessions_total", transport="data_plane") <= len(results)
    assert delta("drafter", "specmesh_draft_sessions_total", transport="grpc") == 0

    assert delta("orchestrator", "specmesh_budget", "_count") == steps
    budgets = sum(r.stats.mean_budget * r.stats.steps for r in results)
    assert delta("orchestrator", "specmesh_budget", "_sum") == pytest.approx(budgets)

    for name in ("specmesh_ttft_seconds", "specmesh_tpot_seconds", "specmesh_e2e_latency_seconds"):
        assert delta("orchestrator", name, "_count") == len(results), name
    ttft = sum(r.stats.ttft_ms for r in results) / 1000  # the same clock readings as the histogram's
    assert delta("orchestrator", "specmesh_ttft_seconds", "_sum") == pytest.approx(ttft, rel=1e-3)
    e2e = delta("orchestrator", "specmesh_e2e_latency_seconds", "_sum")
    assert sum(r.stats.total_ms for r in results) / 1000 <= e2e < sum(r.stats.total_ms for r in results) / 1000 + 1.0

    # each tree the verifier waited for is one the drafter proposed
    trees = delta("verifier", "specmesh_drafter_latency_seconds", "_count", method="recycling")
    assert trees > 0 and delta("drafter", "specmesh_drafter_latency_seconds", "_count", method="recycling") == trees

    for service, families in after.items():
        assert total(families, "specmesh_queue_depth") == 0, service
    assert total(after["verifier"], "specmesh_kv_slots_used") == 0
