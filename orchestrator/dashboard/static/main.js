// The dashboard page: polls /api/summary, /api/fleet and /api/requests every REFRESH_MS, redraws
// the charts and tables, and the waterfall of the selected request's trace (/api/requests/{id}/spans).
// The page URL may set the charted window: /?window=300 (seconds). Fleet load is charted from the
// polls this page has made (the registry holds only the present).

import { LineChart } from "./chart.js";
import { element, number, seconds } from "./format.js";
import { renderFleet, renderRequests } from "./tables.js";
import { renderWaterfall } from "./waterfall.js";

const REFRESH_MS = 1500;
const WINDOW_S = Number(new URLSearchParams(location.search).get("window")) || 120; // seconds charted
const charts = Object.fromEntries([...document.querySelectorAll(".charts figure")]
  .map((figure) => [figure.id.replace("chart-", ""), new LineChart(figure)]));
const fleetSeries = new Map(); // "kind metric address" -> [[t, value]]
let selected = null;

async function json(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function latencySeries(series, name) {
  return ["p50", "p99"].map((q) => ({ name: q, points: series.map((p) => [p.t, p.latency[name][q]]) }));
}

function trackFleet(fleet, now) {
  const record = (key, value) => {
    if (!fleetSeries.has(key)) fleetSeries.set(key, []);
    fleetSeries.get(key).push([now, value]);
  };
  for (const v of fleet.verifiers) {
    record(`verifiers ${v.address}`, v.sessions);
    record(`kv ${v.address}`, v.kv_used);
  }
  for (const d of fleet.drafters) record(`drafters ${d.address}`, d.sessions);
  for (const [key, points] of fleetSeries) {
    while (points.length && points[0][0] < now - WINDOW_S) points.shift();
    if (!points.length) fleetSeries.delete(key);
  }
}

function fleetChart(kind) {
  return [...fleetSeries].filter(([key]) => key.startsWith(`${kind} `))
    .map(([key, points]) => ({ name: key.split(" ")[1], points }));
}

function headline(summary) {
  const items = [
    ["running", summary.running], ["ended", summary.ended], ["goodput", `${number(summary.goodput)} tok/s`],
    ["accepted/step", number(summary.accepted_per_step, 2)], ["TTFT p50", seconds(summary.latency.ttft_s.p50)],
    ["TPOT p50", seconds(summary.latency.tpot_s.p50)], ["latency p99", seconds(summary.latency.latency_s.p99)],
  ];
  document.getElementById("headline").replaceChildren(
    ...items.flatMap(([term, value]) => [element("dt", {}, term), element("dd", {}, String(value))]));
}

function draw(summary, fleet) {
  const range = [summary.now - summary.window_s, summary.now];
  const series = summary.series;
  charts.ttft.update(latencySeries(series, "ttft_s"), range);
  charts.tpot.update(latencySeries(series, "tpot_s"), range);
  charts.latency.update(latencySeries(series, "latency_s"), range);
  charts.goodput.update([{ name: "generated tokens/s", points: series.map((p) => [p.t, p.goodput]) }], range);
  charts.accepted.update([{ name: "mean", points: series.map((p) => [p.t, p.accepted_per_step]) }], range);
  trackFleet(fleet, summary.now);
  for (const kind of ["verifiers", "kv", "drafters"]) charts[kind].update(fleetChart(kind), range);
  headline(summary);
  renderFleet(document.querySelector("#fleet tbody"), fleet);
}

async function showTrace() {
  const title = document.getElementById("trace-title");
  try {
    const trace = await json(`/api/requests/${encodeURIComponent(selected)}/spans`);
    title.textContent = `request ${selected} · trace ${trace.trace_id} · ${trace.spans.length} spans`;
    renderWaterfall(document.getElementById("waterfall"), trace.spans);
  } catch (error) {
    title.textContent = `request ${selected}: ${error.message}`;
  }
}

function select(requestId) {
  selected = requestId;
  for (const row of document.querySelectorAll("#requests tbody tr")) {
    row.classList.toggle("selected", row.dataset.requestId === requestId);
  }
  showTrace();
}

async function refresh() {
  const status = document.getElementById("updated");
  try {
    const [summary, fleet, requests] = await Promise.all([
      json(`/api/summary?window=${WINDOW_S}`), json("/api/fleet"), json("/api/requests?limit=40")]);
    draw(summary, fleet);
    renderRequests(document.querySelector("#requests tbody"), requests.requests, selected, select);
    if (selected) await showTrace(); // spans arrive about every second while a request runs
    status.textContent = `last ${summary.window_s} s · updated ${new Date(summary.now * 1000).toLocaleTimeString()}`;
    status.classList.remove("error");
  } catch (error) {
    status.textContent = `update failed: ${error.message}`;
    status.classList.add("error");
  }
  setTimeout(refresh, REFRESH_MS);
}

refresh();
