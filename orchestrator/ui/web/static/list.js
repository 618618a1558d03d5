// The runs list: `cairn ls --json`, newest first, filtered by status; refreshed every few seconds.
"use strict";

(function () {
  var el = cairn.el, rows = [];
  var filter = document.getElementById("filter"), body = document.querySelector("#runs tbody");

  function render() {
    var wanted = filter.value, shown = 0, fragment = document.createDocumentFragment();
    rows.forEach(function (r) {
      if (wanted && r.status !== wanted) { return; }
      shown += 1;
      var tr = el("tr");
      tr.dataset.run = r.id;
      tr.dataset.status = r.status;
      var link = el("a", null, r.id);
      link.href = "/runs/" + encodeURIComponent(r.id);
      var first = el("td", "path");
      first.appendChild(link);
      tr.appendChild(first);
      var badge = el("span", "badge " + r.status, r.status);
      var status = el("td");
      status.appendChild(badge);
      tr.appendChild(status);
      tr.appendChild(el("td", "task", (r.task || "").replace(/\s+/g, " ").slice(0, 120)));
      tr.appendChild(el("td", "num", cairn.number(r.steps)));
      tr.appendChild(el("td", "num", cairn.number(r.tokens)));
      tr.appendChild(el("td", "num", cairn.percent(r.cache_hit_ratio)));
      tr.appendChild(el("td", "num", cairn.cost(r.cost_usd)));
      tr.appendChild(el("td", null, cairn.when(r.started)));
      tr.appendChild(el("td", "num", r.duration_s === null ? "?" : cairn.seconds(r.duration_s * 1000)));
      tr.appendChild(el("td", null, r.check || "-"));
      tr.appendChild(el("td", "reason", r.reason || ""));
      fragment.appendChild(tr);
    });
    body.replaceChildren(fragment);
    document.getElementById("count").textContent = shown + " of " + rows.length + " runs";
    document.body.dataset.runs = String(shown);
  }

  function load() {
    return cairn.api("/api/runs").then(function (list) {
      rows = list;
      render();
      document.body.dataset.ready = "1";
    }, function (e) { cairn.flash("could not list the runs: " + e.message, true); });
  }

  filter.addEventListener("change", render);
  document.getElementById("new-run").addEventListener("submit", function (e) {
    e.preventDefault();
    var form = e.target, data = {};
    ["task", "model", "template", "image", "workdir", "check"].forEach(function (k) { data[k] = form.elements[k].value; });
    var button = document.getElementById("start");
    button.disabled = true;
    cairn.flash("starting the run…");
    cairn.post("/api/runs", data).then(function (answer) {
      window.location.assign("/runs/" + encodeURIComponent(answer.id));
    }, function (err) {
      cairn.flash(err.message, true);
      button.disabled = false;
    });
  });
  load();
  setInterval(load, 4000);
})();
