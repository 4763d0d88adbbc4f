// The run page's "In-place advice" panel: POST /api/runs/{id}/advice runs `memprof advise` on the
// run's scenario for the selected variant; the answer fills the table and marks the candidate
// nodes in the per-node table. A GET on load shows advice this server computed already.
(function () {
  "use strict";

  function fmtBytes(n) {
    const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let v = Math.abs(n), i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    const text = i === 0 ? String(v) + " bytes" : v.toFixed(2) + " " + units[i];
    return (n < 0 ? "-" : "") + text;
  }

  function saving(n) {
    if (n > 0) return "saves " + fmtBytes(n);
    if (n < 0) return "costs " + fmtBytes(-n);
    return "saves 0 bytes";
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function render(panel, advice) {
    const body = panel.querySelector("#advice-table tbody");
    body.textContent = "";
    advice.candidates.forEach(function (c) {
      const tr = document.createElement("tr");
      tr.dataset.node = c.node;
      tr.className = "advice-" + c.verdict;
      cell(tr, c.node);
      cell(tr, c.op);
      cell(tr, c.verdict, "verdict");
      cell(tr, c.reason);
      cell(tr, c.clone_bytes ? fmtBytes(c.clone_bytes) : "-", "num");
      cell(tr, c.verdict === "safe" ? saving(c.saving_bytes) : "-", "num");
      cell(tr, c.proven ? "yes" : "no");
      body.appendChild(tr);
    });
    panel.querySelector("#advice-table").hidden = advice.candidates.length === 0;
    const summary = panel.querySelector("#advice-summary");
    if (!advice.candidates.length) {
      summary.textContent = "No candidates: no node runs out of place with an in-place form.";
    } else if (!advice.switched.length) {
      summary.textContent = "No candidate is safe: the peak stays " + fmtBytes(advice.peak_before) + ".";
    } else {
      summary.textContent = "Combined (" + advice.switched.join(", ") + " in place): peak allocated " +
        fmtBytes(advice.peak_before) + " → " + fmtBytes(advice.peak_after) + " (" +
        saving(advice.peak_before - advice.peak_after) + "); proof: " +
        (advice.proof === "versions" ? "version counters and stale reads (meta has no values)" : "bitwise") +
        ", " + advice.runs + " runs in " + advice.duration_s + " s.";
    }
    renderLevers(panel, advice.levers || []);
    markNodes(advice);
  }

  // Other changes advise re-ran and proved (the optimizer stepped in backward), one line each.
  const LEVER_NAMES = { optimizer_in_backward: "Optimizer stepped in backward" };

  function renderLevers(panel, levers) {
    const list = panel.querySelector("#advice-levers");
    if (!list) return;
    list.textContent = "";
    levers.forEach(function (l) {
      const li = document.createElement("li");
      li.className = "advice-lever advice-" + l.verdict;
      li.dataset.lever = l.lever;
      const name = (LEVER_NAMES[l.lever] || l.lever) + " (" + l.setting + "): ";
      li.textContent = l.verdict === "safe"
        ? name + "safe, " + saving(l.saving_bytes) + " alone (peak allocated " + fmtBytes(l.peak_after) + "); " + l.reason
        : name + "unsafe, " + l.reason;
      const t = l.together;
      if (l.verdict === "safe" && t) {
        li.textContent += t.verdict === "safe"
          ? ". With the switched nodes in place too: safe, peak allocated " + fmtBytes(t.peak_after)
          : ". With the switched nodes in place too: unsafe, " + t.reason;
      }
      list.appendChild(li);
    });
    list.hidden = levers.length === 0;
  }

  // The per-node table: a tag in the node cell of each candidate's rows.
  function markNodes(advice) {
    const verdicts = {};
    advice.candidates.forEach(function (c) { verdicts[c.node] = c; });
    document.querySelectorAll("table[id$='-ops'] tbody tr").forEach(function (tr) {
      const first = tr.cells[0];
      if (!first) return;
      const old = first.querySelector(".advice-tag");
      if (old) old.remove();
      const c = verdicts[first.dataset.sort || first.textContent.trim()];
      if (!c) return;
      const tag = document.createElement("span");
      tag.className = "advice-tag advice-" + c.verdict;
      tag.textContent = c.verdict === "safe" ? "in place: safe" : "in place: unsafe";
      tag.title = c.reason;
      first.appendChild(document.createTextNode(" "));
      first.appendChild(tag);
      tr.classList.add("advice-candidate");
    });
  }

  function setup() {
    const panel = document.getElementById("advice-panel");
    if (!panel) return;
    const url = panel.dataset.adviceUrl;
    const status = panel.querySelector("#advice-status");
    const button = panel.querySelector("#advice-run");
    fetch(url).then(function (r) { return r.status === 200 ? r.json() : null; })
      .then(function (advice) { if (advice) { render(panel, advice); status.textContent = "Computed earlier on this server."; } })
      .catch(function () {});
    button.addEventListener("click", function () {
      button.disabled = true;
      status.textContent = "Recording the run and re-running each candidate …";
      fetch(url, { method: "POST" })
        .then(function (r) {
          return r.json().then(function (data) { return { ok: r.ok, data: data }; });
        })
        .then(function (res) {
          if (!res.ok) throw new Error(typeof res.data.detail === "string" ? res.data.detail : "the request failed");
          render(panel, res.data);
          status.textContent = "Done.";
        })
        .catch(function (err) { status.textContent = "Advice failed: " + err.message; })
        .finally(function () { button.disabled = false; });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setup);
  else setup();
})();
