// Renders window.STATUS (written by probes/collect.py) into the status page.
"use strict";

const LABELS = {
  operational: "Operational",
  degraded: "Degraded performance",
  down: "Down",
};

function label(status) {
  return LABELS[status] || "Operational";
}

function banner(components) {
  const down = components.filter((c) => c.status === "down").map((c) => c.name);
  const degraded = components.filter((c) => c.status === "degraded").map((c) => c.name);
  if (down.length) return { text: "Outage: " + down.join(", "), bad: true };
  if (degraded.length) return { text: "Degraded: " + degraded.join(", "), bad: true };
  return { text: "All systems operational", bad: false };
}

function render(status) {
  const list = document.getElementById("components");
  for (const c of status.components) {
    const item = document.createElement("li");
    item.dataset.component = c.name;
    item.textContent = c.name + ": " + label(c.status);
    list.appendChild(item);
  }
  const b = banner(status.components);
  const el = document.getElementById("banner");
  el.textContent = b.text;
  el.className = b.bad ? "bad" : "";
  document.getElementById("updated").textContent = "Updated " + status.generated_at;
}

render(window.STATUS);
