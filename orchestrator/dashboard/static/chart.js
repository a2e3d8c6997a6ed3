// A small SVG line chart over a time window: several named series of [t, value] points (t in Unix
// seconds, value null for "no data", which breaks the line), a y axis from 0 and a legend.
// The <svg> carries data-points = how many points it draws.

import { element } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 150;
const PAD = { left: 46, right: 10, top: 10, bottom: 20 };
export const COLORS = ["#2f6fdf", "#e0752d", "#2a9d6a", "#b04fc4", "#c9a227", "#d0455b"];

function svgNode(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

// 0 and about three more round steps above the largest value.
function ticks(max) {
  const raw = max / 3;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  return Array.from({ length: Math.ceil(max / step) + 1 }, (_, i) => i * step);
}

function label(value) {
  return value >= 100 ? value.toFixed(0) : value >= 1 ? value.toFixed(1) : value.toPrecision(2).replace(/\.?0+$/, "");
}

export class LineChart {
  constructor(figure) {
    this.figure = figure;
    this.legend = element("figcaption");
    this.svg = svgNode("svg", { height: HEIGHT, "data-points": 0 });
    figure.append(this.legend, this.svg);
  }

  // series: [{name, points: [[t, value|null], ...]}]; window: [tStart, tEnd].
  update(series, [t0, t1]) {
    const width = this.figure.clientWidth || 300;
    const values = series.flatMap((s) => s.points.map((p) => p[1]).filter((v) => v !== null));
    const yTicks = ticks(Math.max(...values, 1e-9) * 1.05);
    const yMax = yTicks[yTicks.length - 1];
    const x = (t) => PAD.left + ((t - t0) / (t1 - t0 || 1)) * (width - PAD.left - PAD.right);
    const y = (v) => HEIGHT - PAD.bottom - (v / yMax) * (HEIGHT - PAD.top - PAD.bottom);
    this.svg.setAttribute("width", width);
    this.svg.replaceChildren(...this.axes(yTicks, x, y, [t0, t1]));
    let drawn = 0;
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      this.svg.append(svgNode("path", { d: this.path(s.points, x, y), stroke: color, class: "line" }));
      for (const [t, v] of s.points.filter((p) => p[1] !== null)) {
        this.svg.append(svgNode("circle", { cx: x(t), cy: y(v), r: 2, fill: color, class: "point" }));
        drawn += 1;
      }
    });
    this.svg.setAttribute("data-points", drawn);
    const { title, unit } = this.figure.dataset;
    this.legend.replaceChildren(element("b", {}, title), ` ${unit}`, ...this.keys(series));
  }

  path(points, x, y) {
    let d = "", pen = "M";
    for (const [t, v] of points) {
      if (v === null) { pen = "M"; continue; }
      d += `${pen}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = "L";
    }
    return d;
  }

  axes(yTicks, x, y, [t0, t1]) {
    const nodes = [];
    for (const value of yTicks) {
      nodes.push(svgNode("line", { x1: PAD.left, x2: x(t1), y1: y(value), y2: y(value), class: "grid" }));
      const text = svgNode("text", { x: PAD.left - 4, y: y(value) + 3, class: "tick", "text-anchor": "end" });
      text.textContent = label(value);
      nodes.push(text);
    }
    for (const fraction of [0, 0.5, 1]) {
      const ago = Math.round((t1 - t0) * (1 - fraction));
      const text = svgNode("text", { x: x(t0 + (t1 - t0) * fraction), y: HEIGHT - 4, class: "tick",
        "text-anchor": ["start", "middle", "end"][fraction * 2] });
      text.textContent = ago ? `-${ago} s` : "now";
      nodes.push(text);
    }
    return nodes;
  }

  keys(series) {
    return series.map((s, i) => element("span", { class: "key", style: `--color: ${COLORS[i % COLORS.length]}` }, s.name));
  }
}
