"""The ops dashboard against a real stack (bf16 SmolLM2, tracing to the Redis span store): in a real
browser (Playwright driving Debian's chromium) during a short load run — the charts get data
points, the request table fills with the requests the SDK made, a click shows the request's trace
as a waterfall with spans of the orchestrator, the verifier and the drafter — and the JSON behind
it (shapes, the SDK's own stats as the oracle, 400 / 404 errors).

A screenshot goes to $SPECMESH_SCREENSHOT when it is set (the README's is
bench/results/dashboard.png), else to the test's tmp_path."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright
from service_stack import start_stack, wait_until

from specmesh.client import Client
from specmesh.datasets import load_prompts
from specmesh.store.keys import Keys
from specmesh.store.requests import NewRequest, RequestStore
from specmesh.text import TextCodec

pytestmark = pytest.mark.model
CHROMIUM = "/usr/bin/chromium"  # Debian's (`apt-get install chromium`); Playwright's own builds cannot be downloaded
SERVICES = {"specmesh-orchestrator", "specmesh-verifier", "specmesh-drafter"}
CHARTS = ("ttft", "tpot", "latency", "goodput", "accepted", "verifiers", "kv", "drafters")
LOAD, CONCURRENCY, NEW_TOKENS = 6, 3, 40
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_client, default_model_dir):
    stack = start_stack(tmp_path_factory, redis_client, verifiers=1, drafters=1, dtype="bfloat16")
    yield stack
    stack.stop()
    stack.forget()


@pytest.fixture(scope="module")
def prompts(default_model_dir) -> list[list[int]]:
    codec = TextCodec.from_dir(default_model_dir)
    return [codec.chat_prompt(p.text) for p in load_prompts("mtbench", LOAD)]


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), f"no {CHROMIUM}: apt-get install -y chromium (.ci/run does)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


def generate_all(stack, prompts: list[list[int]], concurrency: int) -> list:
    with Client(stack.address, timeout=120) as client, ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda ids: client.generate(token_ids=ids, max_new_tokens=NEW_TOKENS), prompts))


def get(stack, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(stack.http_url + path, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_the_page_charts_a_load_run_and_shows_a_trace_waterfall(stack, browser, prompts, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1250})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(stack.http_url + "/?window=60")
    expect(page.locator("#fleet tr[data-kind=verifier]")).to_have_count(1, timeout=TIMEOUT_MS)
    expect(page.locator("#fleet tr[data-kind=drafter]")).to_have_count(1)

    results = generate_all(stack, prompts, CONCURRENCY)  # the page polls all along

    for result in results:
        row = page.locator(f"#requests tbody tr[data-request-id='{result.request_id}']")
        expect(row).to_contain_text("finished", timeout=TIMEOUT_MS)
    for chart in CHARTS:
        expect(page.locator(f"#chart-{chart} svg circle.point").first).to_be_attached(timeout=TIMEOUT_MS)
    # the first requests of this stack, all ended within the charted minute (once their buckets are whole)
    expect(page.locator("#headline dt:text-is('ended') + dd")).to_have_text(str(LOAD), timeout=TIMEOUT_MS)

    chosen = max(results, key=lambda r: r.stats.steps)
    page.locator(f"#requests tbody tr[data-request-id='{chosen.request_id}']").click()
    expect(page.locator("#requests tbody tr.selected")).to_have_attribute("data-request-id", chosen.request_id)
    for service in SERVICES:  # spans reach the store about every second: the page re-reads them
        expect(page.locator(f"#waterfall .span[data-service='{service}']").first).to_be_visible(timeout=TIMEOUT_MS)
    for name, service in (("request", "orchestrator"), ("session", "orchestrator"), ("prefill", "verifier"),
                          ("step", "verifier"), ("draft", "drafter")):
        row = page.locator(f"#waterfall .span[data-name='{name}']").first
        expect(row).to_contain_text(f"{service} {name}", timeout=TIMEOUT_MS)
    expect(page.locator("#waterfall .span[data-name='step']")).to_have_count(chosen.stats.steps, timeout=TIMEOUT_MS)
    expect(page.locator("#trace-title")).to_contain_text(chosen.request_id)
    assert page.locator("#waterfall .wf-bar").count() == page.locator("#waterfall .span").count()

    page.screenshot(path=os.environ.get("SPECMESH_SCREENSHOT") or str(tmp_path / "dashboard.png"), full_page=True)
    assert not errors, errors
    page.close()


def test_api_json_follows_the_requests(stack, prompts):
    results = generate_all(stack, prompts[:2], 2)
    wait_until(lambda: get(stack, "/api/summary?window=300")[1]["ended"] >= 2, what="a whole bucket after the requests")
    status, summary = get(stack, "/api/summary?window=300")
    assert status == 200 and summary["goodput"] > 0 and summary["window_s"] == 300
    assert summary["latency"]["ttft_s"]["p50"] <= summary["latency"]["ttft_s"]["p99"]
    assert len(summary["series"]) == 300 / summary["bucket_s"] and summary["accepted_per_step"] >= 0
    status, fleet = get(stack, "/api/fleet")
    (verifier,), (drafter,) = fleet["verifiers"], fleet["drafters"]
    assert verifier["kv_slots"] == stack.config.slots and verifier["kv_used"] == verifier["kv_slots"] - verifier["kv_free"]
    assert {"sessions", "waiting", "load", "accepting", "age_s"} <= set(verifier) and verifier["accepting"] == 1
    assert "recycling" in drafter["methods"] and {"sessions", "recycling_rows", "age_s"} <= set(drafter)

    status, listed = get(stack, "/api/requests?limit=2&status=finished")
    assert status == 200 and len(listed["requests"]) == 2 and {r["status"] for r in listed["requests"]} == {"finished"}
    for result in results:
        status, entry = get(stack, f"/api/requests/{result.request_id}")
        assert status == 200 and entry["status"] == "finished" and entry["method"] == "recycling"
        assert (entry["generated_tokens"], entry["steps"], entry["accepted_tokens"]) == (
            len(result.token_ids), result.stats.steps, result.stats.accepted_tokens)
        assert entry["ttft_s"] <= entry["latency_s"] and entry["drafter"] == result.stats.drafter
        spans = f"/api/requests/{result.request_id}/spans"
        wait_until(lambda: get(stack, spans)[1]["spans"], what="the request's spans in the store (written about once a second)")
        status, trace = get(stack, spans)
        assert status == 200 and {s["trace_id"] for s in trace["spans"]} == {trace["trace_id"]}
        assert {s["service"] for s in trace["spans"]} <= SERVICES


def test_api_reads_a_request_another_replica_ran_from_redis(stack, redis_client):
    store = RequestStore(redis_client, Keys(stack.config.redis_prefix))
    request_id = f"elsewhere-{uuid.uuid4().hex[:8]}"
    store.create(NewRequest(request_id, [1, 2, 3], 8, 0.0, 1.0, 0, 0, (), "ngram", 4))
    store.commit_event(request_id, 0, 0, [7], 0, 0)
    store.commit_event(request_id, 0, 1, [8, 9], 1, 1)
    store.finish(request_id, "finished", "length")
    status, entry = get(stack, f"/api/requests/{request_id}")
    assert status == 200 and (entry["status"], entry["reason"], entry["method"]) == ("finished", "length", "ngram")
    assert (entry["prompt_tokens"], entry["generated_tokens"], entry["steps"], entry["accepted_tokens"]) == (3, 3, 1, 1)
    assert entry["latency_s"] is not None and entry["ttft_s"] <= entry["latency_s"]
    assert get(stack, f"/api/requests/{request_id}/spans")[0] == 404  # traced by no one


@pytest.mark.parametrize("path, status, param", [
    ("/api/requests/no-such-request", 404, "request_id"),
    ("/api/requests/no-such-request/spans", 404, "request_id"),
    ("/api/no-such-endpoint", 404, None),
    ("/api/summary?window=soon", 400, "window"),
    ("/api/summary?window=0", 400, "window"),
    ("/api/summary?window=nan", 400, "window"),
    ("/api/requests?limit=-1", 400, "limit"),
    ("/api/requests?limit=2.5", 400, "limit"),
    ("/api/requests?status=lost", 400, "status"),
])
def test_api_errors_are_json_naming_the_parameter(stack, path, status, param):
    got, body = get(stack, path)
    assert got == status and body["error"]["param"] == param and body["error"]["message"]
