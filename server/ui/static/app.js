// sbxdb UI: keyboard navigation of the history graph (arrow keys, j/k,
// Home/End move between checkpoints) and a busy state for forms that run
// long. The pages work without it.
"use strict";
document.addEventListener("keydown", (e) => {
  const node = e.target.closest && e.target.closest(".graph a.node");
  if (!node) return;
  const nodes = Array.from(document.querySelectorAll(".graph a.node"));
  let i = nodes.indexOf(node);
  switch (e.key) {
    case "ArrowDown": case "ArrowRight": case "j": i++; break;
    case "ArrowUp": case "ArrowLeft": case "k": i--; break;
    case "Home": i = 0; break;
    case "End": i = nodes.length - 1; break;
    default: return;
  }
  e.preventDefault();
  nodes[Math.max(0, Math.min(nodes.length - 1, i))].focus();
});
document.addEventListener("submit", (e) => {
  const b = e.target.querySelector("button[data-busy]");
  if (b) { b.disabled = true; b.textContent = b.dataset.busy; }
});
