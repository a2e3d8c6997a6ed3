// Number and time formatting shared by the dashboard's views.

export function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1) return `${(value * 1000).toFixed(value < 0.01 ? 1 : 0)} ms`;
  return `${value.toFixed(2)} s`;
}

export function number(value, digits = 1) {
  if (value === null || value === undefined) return "–";
  return Math.abs(value) >= 1000 ? Math.round(value).toLocaleString("en") : value.toFixed(digits);
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}

export function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}
