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
    var first = el("td", "path run");
    first.appendChild(link);
    tr.appendChild(first);
    var status = el("td", "status");
    status.appendChild(cairn.badge(r.status, r.check));
    tr.appendChild(status);
    var task = (r.task || "").replace(/\s+/g, " ");
    var taskCell = el("td", "task");
    taskCell.appendChild(el("div", "clamp", task.slice(0, 300)));
    taskCell.title = task.slice(0, 2000);
    tr.appendChild(taskCell);
    tr.appendChild(el("td", "num steps", cairn.number(r.steps)));
    tr.appendChild(el("td", "num tokens", cairn.number(r.tokens)));
    tr.appendChild(el("td", "num cache", cairn.percent(r.cache_hit_ratio)));
    tr.appendChild(el("td", "num cost", cairn.cost(r.cost_usd)));
    tr.appendChild(el("td", "started", cairn.when(r.started)));
    tr.appendChild(el("td", "num time", r.duration_s === null ? "?" : cairn.seconds(r.duration_s * 1000)));
    tr.appendChild(el("td", "check", r.check || "-"));
    var reason = el("td", "reason", r.reason || "");
    reason.title = r.reason || "";
    tr.appendChild(reason);
    return tr;
  }

  // Rows go up a page at a time, the next when the end of the table comes into view: a list of
  // thousands costs the browser no more than a few hundred rows until one scrolls through it. A
  // refresh that changes nothing draws nothing; one that does keeps as many rows as were shown.
  var PAGE = 100, list = [], shown = 0;
  function render(keep) {
    var wanted = filter.value, before = keep ? shown : 0;
    list = rows.filter(function (r) { return !wanted || r.status === wanted; });
    shown = 0;
    body.replaceChildren();
    more(Math.max(before, PAGE));
    mark("shownMs");
  }

  function more(count) {
    var fragment = document.createDocumentFragment(), end = Math.min(shown + count, list.length);
    for (; shown < end; shown++) { fragment.appendChild(row(list[shown])); }
    body.appendChild(fragment);
    cairn.text(document.getElementById("count"), list.length + " of " + rows.length + " runs" +
      (shown < list.length ? " (" + shown + " shown: scroll for more)" : ""));
    document.body.dataset.runs = String(list.length);
    document.body.dataset.shown = String(shown);
  }

  var end = document.getElementById("more");
  function nearEnd() {
    if (shown < list.length && end.getBoundingClientRect().top < window.innerHeight + 600) { more(PAGE); }
  }
  window.addEventListener("scroll", nearEnd, { passive: true });
  window.addEventListener("resize", nearEnd);

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
    return cairn.api("/api/runs").then(function (fresh) {
      var text = JSON.stringify(fresh);
      if (text === last) { return; }
      last = text;
      rows = fresh;
      render(true);
      document.body.dataset.ready = "1";
    }, function (e) { cairn.flash("could not list the runs: " + e.message, true); });
  }

  filter.addEventListener("change", function () { render(false); });
  document.getElementById("new-run").addEventListener("submit", function (e) {
    e.preventDefault();
    var form = e.target, data = {};
    ["task", "model", "api_base", "max_steps", "max_cost", "template", "image", "workdir", "check"].forEach(function (k) {
      data[k] = form.elements[k].value;
    });
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
