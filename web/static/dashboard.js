// Dashboard-only behaviour: the runs filter, timeline zoom that fetches detail from the server,
// and running a scenario with progress. Figures and sortable tables: /static/report.js.
(function () {
  "use strict";
  const memprof = (window.memprof = window.memprof || {});

  function setupRunsFilter() {
    const select = document.getElementById("scenario-filter");
    const table = document.getElementById("runs-table");
    if (!select || !table) return;
    const apply = function () {
      let shown = 0;
      table.tBodies[0].querySelectorAll("tr").forEach(function (row) {
        const visible = !select.value || row.dataset.scenario === select.value;
        row.hidden = !visible;
        if (visible) shown += 1;
      });
      document.getElementById("run-count").textContent = shown;
      const url = new URL(window.location.href);
      if (select.value) url.searchParams.set("scenario", select.value);
      else url.searchParams.delete("scenario");
      window.history.replaceState(null, "", url);
    };
    select.addEventListener("change", apply);
    apply();
  }

  // Zooming the timeline asks the server for the events of the visible window, so a reduced
  // million-event timeline gains detail as you zoom; double-click goes back to everything.
  function setupTimelineZoom() {
    const el = document.querySelector("[data-timeline-url]");
    if (!el) return;
    let request = 0;
    const load = function (start, end) {
      const params = new URLSearchParams({ x: el.dataset.x || "index", max_points: "2000" });
      if (start !== null) params.set("start", start);
      if (end !== null) params.set("end", end);
      const mine = ++request;
      el.classList.add("loading");
      return fetch(el.dataset.timelineUrl + "?" + params.toString())
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (fig) {
          if (mine !== request) return;
          if (start !== null) fig.layout.xaxis.range = el.layout.xaxis.range;
          const note = document.getElementById("timeline-note");
          if (note && fig.layout.meta && fig.layout.meta.note) note.textContent = fig.layout.meta.note;
          return Plotly.react(el, fig.data, fig.layout, memprof.plotConfig);
        })
        .catch(function () { /* keep the current chart */ })
        .finally(function () { if (mine === request) el.classList.remove("loading"); });
    };
    el.on("plotly_relayout", function (change) {
      const meta = el.layout.meta || {};
      if (change["xaxis.autorange"]) {
        if (meta.start !== 0 || meta.end !== meta.total_events - 1) load(null, null);
        return;
      }
      // A drag gives "xaxis.range[0]" and "[1]"; Plotly.relayout may give "xaxis.range".
      const range = change["xaxis.range"] || [change["xaxis.range[0]"], change["xaxis.range[1]"]];
      const lo = range[0], hi = range[1];
      if (lo === undefined || hi === undefined) return;
      const [start, end] = indexRange(el, lo, hi, meta);
      if (start === meta.start && end === meta.end) return;
      if (!meta.reduced && start >= meta.start && end <= meta.end) return; // already exact
      load(start, end);
    });
  }

  // Event indexes covering the x range [lo, hi]: on an index axis they are the range itself;
  // on a time axis, the kept samples just outside it (their event indexes are in customdata).
  function indexRange(el, lo, hi, meta) {
    const last = meta.total_events - 1;
    if ((meta.x || "index") === "index") {
      return [Math.max(0, Math.floor(lo)), Math.min(last, Math.ceil(hi))];
    }
    const trace = el.data.find(function (t) { return t.name === "allocated"; });
    let start = meta.start, end = meta.end;
    for (let i = 0; i < trace.x.length; i++) {
      const index = trace.customdata[i][7];
      if (trace.x[i] <= lo) start = index;
      if (trace.x[i] >= hi) { end = index; break; }
    }
    return [Math.max(0, start), Math.min(last, end)];
  }

  // What the row's picker asks for: the variants ticked (all: none sent), a device, an allocator.
  function runRequest(button) {
    const body = { scenario: button.dataset.scenario };
    const row = button.closest("tr");
    if (!row) return body;
    const boxes = Array.prototype.slice.call(row.querySelectorAll("input[name=variant]"));
    const ticked = boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.value; });
    if (boxes.length && !ticked.length) return null;
    if (ticked.length && ticked.length < boxes.length) body.variants = ticked;
    ["device", "allocator"].forEach(function (name) {
      const select = row.querySelector("select[name=" + name + "]");
      if (select && select.value) body[name] = select.value;
    });
    return body;
  }

  function setupScenarioRuns() {
    const panel = document.getElementById("job-panel");
    if (!panel) return;
    const show = function (job) {
      panel.hidden = false;
      document.getElementById("job-scenario").textContent = job.scenario_name;
      const status = document.getElementById("job-status");
      status.textContent = job.status;
      status.className = "badge badge-" + job.status;
      document.getElementById("job-bar").style.width = Math.round(job.fraction * 100) + "%";
      document.getElementById("job-message").textContent = job.message;
      const error = document.getElementById("job-error");
      error.hidden = !job.error;
      error.textContent = job.error || "";
    };
    const follow = function (id) {
      fetch("/api/jobs/" + encodeURIComponent(id))
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (job) {
          show(job);
          if (job.status === "done" && job.run_id) {
            window.location.href = "/runs/" + encodeURIComponent(job.run_id);
          } else if (job.status === "queued" || job.status === "running") {
            window.setTimeout(function () { follow(id); }, 400);
          } else {
            setButtons(false);
          }
        })
        .catch(function () { setButtons(false); });
    };
    const buttons = document.querySelectorAll(".run-button");
    const setButtons = function (busy) {
      buttons.forEach(function (b) { if (!b.dataset.unavailable) b.disabled = busy; });
    };
    buttons.forEach(function (b) { if (b.disabled) b.dataset.unavailable = "1"; });
    buttons.forEach(function (button) {
      button.addEventListener("click", function () {
        const request = runRequest(button);
        if (request === null) {
          show({ scenario_name: button.dataset.scenario, status: "failed", fraction: 0,
                 message: "", error: "tick at least one variant to run" });
          return;
        }
        setButtons(true);
        fetch("/api/runs", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(request),
        })
          .then(function (r) {
            return r.json().then(function (body) { return { ok: r.ok, body: body }; });
          })
          .then(function (res) {
            if (!res.ok) {
              show({ scenario_name: button.dataset.scenario, status: "failed", fraction: 0,
                     message: "", error: res.body.detail || "could not start the run" });
              setButtons(false);
              return;
            }
            const url = new URL(window.location.href);
            url.searchParams.set("job", res.body.id);
            window.history.replaceState(null, "", url);
            show(res.body);
            follow(res.body.id);
          });
      });
    });
    const pending = new URL(window.location.href).searchParams.get("job");
    if (pending) follow(pending);
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupRunsFilter();
    setupScenarioRuns();
    Promise.resolve(memprof.chartsReady).then(setupTimelineZoom);
  });
})();
