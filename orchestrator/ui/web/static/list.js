// The runs list: `cairn ls --json`, newest first, filtered by status; refreshed every few seconds.
"use strict";

(function () {
  var el = cairn.el, rows = [];
  var filter = document.getElementById("filter"), body = document.querySelector("#runs tbody");

  function row(r) {
    var tr = el("tr");
    tr.dataset.run = r.id;
    tr.dataset.status = r.status;
    var link = el("a", null, r.id);
    link.href = "/runs/" + encodeURIComponent(r.id);
    var first = el("td", "path");
    first.appendChild(link);
    tr.appendChild(first);
    var status = el("td");
    status.appendChild(el("span", "badge " + r.status, r.status));
    tr.appendChild(status);
    tr.appendChild(el("td", "task", (r.task || "").replace(/\s+/g, " ").slice(0, 200)));
    tr.appendChild(el("td", "num", cairn.number(r.steps)));
    tr.appendChild(el("td", "num", cairn.number(r.tokens)));
    tr.appendChild(el("td", "num", cairn.percent(r.cache_hit_ratio)));
    tr.appendChild(el("td", "num", cairn.cost(r.cost_usd)));
    tr.appendChild(el("td", null, cairn.when(r.started)));
    tr.appendChild(el("td", "num", r.duration_s === null ? "?" : cairn.seconds(r.duration_s * 1000)));
    tr.appendChild(el("td", null, r.check || "-"));
    tr.appendChild(el("td", "reason", r.reason || ""));
    return tr;
  }

  // The first screenful goes up at once and the rest after it is painted: the first rows are on screen
  // without waiting for a thousand to be laid out. A refresh that changes nothing draws nothing.
  var generation = 0;
  function render() {
    var mine = ++generation, wanted = filter.value, at = 0;
    var list = rows.filter(function (r) { return !wanted || r.status === wanted; });
    var replacing = body.children.length > 0;
    var done = document.createDocumentFragment();
    function chunk() {
      if (mine !== generation) { return; }
      var fragment = replacing ? done : document.createDocumentFragment();
      for (var end = replacing || at ? list.length : Math.min(60, list.length); at < end; at++) {
        fragment.appendChild(row(list[at]));
      }
      if (replacing) { body.replaceChildren(fragment); } else { body.appendChild(fragment); }
      if (at < list.length) { setTimeout(chunk, 16); return; }  // after a paint
      document.getElementById("count").textContent = list.length + " of " + rows.length + " runs";
      document.body.dataset.runs = String(list.length);
      mark("allMs");
    }
    if (!replacing) { body.replaceChildren(); }
    mark("shownMs");
    chunk();
  }

  function mark(name) {  // when the rows were first on screen, in ms since the page was asked for
    if (document.body.dataset[name]) { return; }
    requestAnimationFrame(function () {
      setTimeout(function () {
        if (!document.body.dataset[name]) { document.body.dataset[name] = String(Math.round(performance.now())); }
      }, 0);
    });
  }

  var last = null;
  function load() {
    return cairn.api("/api/runs").then(function (list) {
      var text = JSON.stringify(list);
      if (text === last) { return; }
      last = text;
      rows = list;
      render();
      document.body.dataset.ready = "1";
    }, function (e) { cairn.flash("could not list the runs: " + e.message, true); });
  }

  filter.addEventListener("change", function () { body.replaceChildren(); render(); });
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
