// A trace as a waterfall: one row per span (spans as the Redis span store keeps them, from every
// service), children under their parent in start order, a bar from its start to its end on a
// common time axis, labelled with its service and name. Rows carry data-service and data-name.

import { element } from "./format.js";

const TICKS = 5;

// Depth-first order: roots (spans whose parent is not in the trace) first, children by start.
function ordered(spans) {
  const ids = new Set(spans.map((s) => s.span_id));
  const children = new Map();
  for (const span of spans) {
    const parent = ids.has(span.parent_span_id) ? span.parent_span_id : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(span);
  }
  const rows = [];
  const visit = (parent, depth) => {
    for (const span of (children.get(parent) || []).sort((a, b) => a.start_ns - b.start_ns)) {
      rows.push({ span, depth });
      visit(span.span_id, depth + 1);
    }
  };
  visit(null, 0);
  return rows;
}

function service(span) {
  return span.service.replace(/^specmesh-/, "");
}

function tooltip(span, ms) {
  const attributes = Object.entries(span.attributes).map(([k, v]) => `${k} = ${v}`);
  return [`${span.service} · ${span.name} · ${ms.toFixed(2)} ms`, span.instance, ...attributes].join("\n");
}

function axis(totalMs) {
  const row = element("div", { class: "wf-row wf-axis" }, element("div", { class: "wf-label" }, "span"));
  const track = element("div", { class: "wf-track" });
  for (let i = 0; i <= TICKS; i += 1) {
    const tick = element("span", { class: "wf-tick", style: `left: ${(100 * i) / TICKS}%` });
    tick.textContent = `${((totalMs * i) / TICKS).toFixed(0)} ms`;
    track.append(tick);
  }
  row.append(track);
  return row;
}

export function renderWaterfall(container, spans) {
  if (!spans.length) {
    container.replaceChildren(element("p", { class: "muted" }, "no spans stored yet"));
    return;
  }
  const start = Math.min(...spans.map((s) => s.start_ns));
  const end = Math.max(...spans.map((s) => s.end_ns));
  const total = Math.max(end - start, 1);
  const rows = ordered(spans).map(({ span, depth }) => {
    const ms = (span.end_ns - span.start_ns) / 1e6;
    const label = element("div", { class: "wf-label", style: `padding-left: ${depth * 10}px` },
      element("span", { class: `wf-service svc-${service(span)}` }, service(span)), ` ${span.name}`,
      element("span", { class: "wf-ms" }, `${ms.toFixed(1)} ms`));
    const bar = element("div", {
      class: `wf-bar svc-${service(span)}${span.status.code === "ERROR" ? " error" : ""}`,
      style: `left: ${(100 * (span.start_ns - start)) / total}%; width: ${Math.max((100 * (span.end_ns - span.start_ns)) / total, 0.2)}%`,
    });
    return element("div", { class: "wf-row span", "data-service": span.service, "data-name": span.name,
      title: tooltip(span, ms) }, label, element("div", { class: "wf-track" }, bar));
  });
  container.replaceChildren(axis(total / 1e6), ...rows);
}
