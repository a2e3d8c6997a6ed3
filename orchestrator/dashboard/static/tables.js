// The fleet table (live verifiers and drafters from /api/fleet) and the recent-requests table
// (/api/requests); a click on a request row calls onSelect(request id).

import { element, number, seconds, shortId } from "./format.js";

function cells(row, values) {
  row.replaceChildren(...values.map((v) => (v instanceof Node ? element("td", {}, v) : element("td", {}, String(v)))));
  return row;
}

function meter(used, total) {
  const fraction = total ? used / total : 0;
  return element("span", { class: "meter", title: `${used} of ${total}` },
    element("span", { class: "meter-fill", style: `width: ${100 * fraction}%` }), ` ${used} / ${total}`);
}

export function renderFleet(tbody, fleet) {
  const verifiers = fleet.verifiers.map((v) => cells(element("tr", { "data-kind": "verifier" }), [
    "verifier", v.address, v.sessions, v.waiting, meter(v.kv_used, v.kv_slots), number(v.load, 2),
    v.accepting ? "" : "draining", `${number(v.age_s)} s ago`]));
  const drafters = fleet.drafters.map((d) => cells(element("tr", { "data-kind": "drafter" }), [
    "drafter", d.address, d.sessions, "", "", "", `${d.methods.join(", ")} · ${number(d.recycling_rows, 0)} rows`,
    `${number(d.age_s)} s ago`]));
  const empty = [cells(element("tr"), ["no live verifier or drafter", "", "", "", "", "", "", ""])];
  tbody.replaceChildren(...(verifiers.length + drafters.length ? [...verifiers, ...drafters] : empty));
}

export function renderRequests(tbody, requests, selected, onSelect) {
  tbody.replaceChildren(...requests.map((r) => {
    const row = cells(element("tr", { "data-request-id": r.request_id, title: r.request_id }), [
      shortId(r.request_id), element("span", { class: `status status-${r.status}` }, r.reason && r.status !== "running" ? `${r.status} (${r.reason})` : r.status),
      r.method, `${r.generated_tokens}`, seconds(r.ttft_s), seconds(r.latency_s), number(r.accepted_per_step, 2)]);
    if (r.request_id === selected) row.classList.add("selected");
    row.addEventListener("click", () => onSelect(r.request_id));
    return row;
  }));
}
