// Shared by the dashboard and the offline HTML report: draw the figures embedded as JSON
// next to their <div data-figure>, and make tables with class "sortable" sortable.
(function () {
  "use strict";
  const memprof = (window.memprof = window.memprof || {});

  memprof.plotConfig = {
    displaylogo: false,
    responsive: true,
    showLink: false,
    showSendToCloud: false,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
  };

  memprof.renderFigure = function (el) {
    const source = document.getElementById(el.dataset.figure);
    const fig = JSON.parse(source.textContent);
    return Plotly.newPlot(el, fig.data, fig.layout, memprof.plotConfig);
  };

  memprof.renderFigures = function (root) {
    const pending = [];
    if (typeof Plotly === "undefined") return Promise.resolve(); // a page without charts
    (root || document).querySelectorAll("[data-figure]").forEach(function (el) {
      pending.push(memprof.renderFigure(el));
    });
    return Promise.all(pending);
  };

  function sortKey(cell, numeric) {
    const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent;
    if (!numeric) return raw.toLowerCase();
    const n = parseFloat(raw);
    return Number.isNaN(n) ? -Infinity : n;
  }

  memprof.makeSortable = function (table) {
    const headers = table.querySelectorAll("thead th");
    headers.forEach(function (th, col) {
      const sort = function () {
        const numeric = th.dataset.type === "num";
        // First click: numbers largest first, text A to Z; then toggle.
        const current = th.getAttribute("aria-sort");
        const descending = current ? current === "ascending" : numeric;
        headers.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) {
          const x = sortKey(a.cells[col], numeric);
          const y = sortKey(b.cells[col], numeric);
          const order = x < y ? -1 : x > y ? 1 : 0;
          return descending ? -order : order;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
  };

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.sortable").forEach(memprof.makeSortable);
    memprof.chartsReady = memprof.renderFigures(document).then(function () {
      document.body.dataset.chartsReady = "true";
    });
  });
})();
