// A run's page, live: the event log arrives as server-sent events (feed.py) and is folded into steps
// here. Rendering is incremental: an item updates only its step's one-line summary; a step's body is
// built when it is opened (and rebuilt while open as items arrive), so a run of 10,000 events stays
// a page of a few thousand lines. Each row names its calls as `cairn show` does. While the run is live
// its newest step is open, and the running call's output streams into it (`output` events). Everything
// from the run goes in as text (cairn.el / cairn.text, which shows bidirectional controls as their codes).
"use strict";

(function () {
  var el = cairn.el;
  var runId = decodeURIComponent(location.pathname.split("/").pop());
  var base = "/api/runs/" + encodeURIComponent(runId);
  var steps = {}, order = [], calls = {}, asked = {}, answered = {};
  var queue = [], scheduled = false, lastTs = null, caughtUp = false;
  var summary = null, totals = { prompt: 0, cached: 0, completion: 0, cost: 0, costKnown: true };
  var timeline = document.getElementById("timeline");
  var RESULT_SHOWN = 4000;
  var LIVE_CHARS = 64 * 1024;  // of a running call's output kept on the page (the end of it)
  var autoOpened = null;  // the step the page opened because it was the newest of a live run
  var LIVE_TOOLS = { shell_exec: true, shell_start: true, shell_send: true };  // calls whose output streams

  cairn.text(document.getElementById("run-id"), runId);
  document.title = "cairn run " + runId;

  // -- folding items into steps ---------------------------------------------------------------------

  function stepOf(n) {
    var step = steps[n];
    if (step) { return step; }
    step = steps[n] = { n: n, text: null, calls: [], messages: [], notices: [], own: null,
                        spent: { prompt: 0, cached: 0, completion: 0, cost: null }, start: lastTs, end: lastTs,
                        changed: false, node: null, dirty: true };
    if (n > 0) { order.push(n); }
    return step;
  }

  function fold(item) {
    var n = item.step || 0, step;
    if (item.t === "output") {
      output(item.output);
      return;
    }
    if (item.t === "task") {
      cairn.text(document.getElementById("task"), item.task);
    } else if (item.t === "status") {
      if (item.result) {
        cairn.text(document.getElementById("result"), item.result);
        document.getElementById("result-box").hidden = false;
      }
      setStatus(item.status);
      refreshSoon("summary");
    } else if (item.t === "check") {
      var box = document.getElementById("check-rounds");
      var round = el("details", "check-round");
      round.dataset.round = item.round;
      round.appendChild(el("summary", null, "#" + item.round + " after step " + n + ": " + item.line +
                                            (item.sent_back ? " (sent back to the agent)" : "")));
      round.appendChild(el("pre", null, item.output || ""));
      box.appendChild(round);
      document.getElementById("checks").hidden = false;
    } else if (item.t === "asked") {
      asked[item.id] = item.why;
      if (!calls[item.id] && n > 0) {  // the call that waits for a yes: shown as the call it is, before it runs
        var waiting = { id: item.id, step: n, name: item.name, line: item.line || item.name, arguments: item.arguments,
                        result: null, error: false, offloaded_to: null, finished: false, duration_ms: null, waiting: true,
                        live: null };
        calls[item.id] = waiting;
        stepOf(n).calls.push(waiting);
        touch(n);
      }
    } else if (item.t === "answered") {
      answered[item.id] = item.line;
      if (calls[item.id]) { touch(calls[item.id].step); }
    } else if (n > 0 || item.t === "message") {
      step = stepOf(n);
      if (item.t === "usage") {
        var u = item.usage;
        if (!item.child) { step.own = u; }
        step.spent.prompt += u.prompt_tokens || 0;
        step.spent.cached += u.cached_tokens || 0;
        step.spent.completion += u.completion_tokens || 0;
        if (u.cost_usd !== null && u.cost_usd !== undefined) { step.spent.cost = (step.spent.cost || 0) + u.cost_usd; }
        totals.prompt += u.prompt_tokens || 0;
        totals.cached += u.cached_tokens || 0;
        totals.completion += u.completion_tokens || 0;
        if (u.cost_usd === null || u.cost_usd === undefined) { totals.costKnown = false; } else { totals.cost += u.cost_usd; }
        refreshSoon("charts");
      } else if (item.t === "text") {
        step.text = item.text;
      } else if (item.t === "message") {
        step.messages.push(item);
      } else if (item.t === "notice") {
        step.notices.push(item.text);
      } else if (item.t === "compaction") {
        step.notices.push("compaction (" + item.kind + "): " + cairn.number(item.tokens_before) + " → " +
                          cairn.number(item.tokens_after) + " tokens");
      } else if (item.t === "critic") {
        step.notices.push("critic: " + item.text);
      } else if (item.t === "call") {
        var call = calls[item.id] && calls[item.id].waiting ? calls[item.id] : null;
        if (call) {  // the call asked about goes on: the same row, now running
          call.waiting = false; call.arguments = item.arguments;
        } else {
          call = { id: item.id, step: n, name: item.name, line: item.line || item.name, arguments: item.arguments,
                   result: null, error: false, offloaded_to: null, finished: false, duration_ms: null, live: null };
          calls[item.id] = call;
          step.calls.push(call);
        }
      } else if (item.t === "result") {
        var c = calls[item.id];
        if (c) {
          c.result = item.result; c.error = item.error; c.offloaded_to = item.offloaded_to;
          c.duration_ms = item.duration_ms; c.finished = true; c.live = null;
          if (c.name === "todo_write") { refreshSoon("todo"); }
        }
      } else if (item.t === "checkpoint") {
        step.changed = step.changed || item.changed;
        refreshSoon("files");
      }
      if (step.start === null) { step.start = item.ts; }
      step.end = item.ts;
      touch(n);
    }
    lastTs = item.ts;
  }

  function touch(n) {
    var step = steps[n];
    if (step) { step.dirty = true; }
  }

  // -- drawing --------------------------------------------------------------------------------------

  function drawSteps() {
    var fragment = null;
    order.forEach(function (n) {
      var step = steps[n];
      if (!step.dirty) { return; }
      step.dirty = false;
      if (!step.node) {
        step.node = el("details", "step");
        step.node.id = "step-" + n;
        step.node.dataset.step = n;
        step.node.appendChild(el("summary"));
        step.node.appendChild(el("div", "body"));
        step.node.addEventListener("toggle", function () { if (step.node.open) { drawBody(step); } });
        if (!fragment) { fragment = document.createDocumentFragment(); }
        fragment.appendChild(step.node);
      }
      drawSummary(step);
      if (step.node.open) { drawBody(step); }
    });
    if (fragment) { timeline.appendChild(fragment); }
    openNewest();
    cairn.text(document.getElementById("n-steps"), String(order.length));
    document.body.dataset.steps = String(order.length);
    drawTotals();
  }

  // While the run is live, its newest step is open; the step the page opened before closes (unless a
  // person closed it already or opened it themselves). Older steps stay as the person left them.
  function isLive() {
    return summary ? summary.live : document.body.dataset.status === "running";
  }

  function openNewest() {
    var newest = order.length ? steps[order[order.length - 1]] : null;
    if (!newest || !newest.node || !isLive() || autoOpened === newest.n) { return; }
    var before = autoOpened !== null ? steps[autoOpened] : null;
    if (before && before.node.open && before.autoOpen) { before.node.open = false; }
    if (before) { before.autoOpen = false; }
    autoOpened = newest.n;
    if (!newest.node.open) {
      newest.autoOpen = true;
      newest.node.open = true;
      drawBody(newest);
    }
  }

  function drawSummary(step) {
    var summaryNode = step.node.firstChild, errors = false;
    var tools = el("span", "tools");
    if (step.messages.length) { tools.appendChild(el("span", null, "✉ ")); }
    step.calls.forEach(function (c, i) {
      if (i) { tools.appendChild(el("span", "sep", " · ")); }
      var name = el("span", "call-line", c.line);
      name.title = c.name;
      tools.appendChild(name);
      if (c.error) { errors = true; tools.appendChild(el("span", "mark-err", " ✗")); }
      if (c.offloaded_to) { tools.appendChild(el("span", "mark-off", " ⇢")); }
      if (c.waiting) { tools.appendChild(el("span", "meta", " ? waits for approval")); }
      else if (!c.finished) { tools.appendChild(el("span", "meta", " … running")); }
    });
    if (!step.calls.length) { tools.appendChild(el("span", "meta", step.text ? "(text only)" : "")); }
    var s = step.spent;
    var tok = el("span", "tok", cairn.number(s.prompt) + " prompt · " + cairn.number(s.cached) + " cached" +
                                (s.cost !== null ? " · $" + s.cost.toFixed(4) : ""));
    var dur = el("span", "dur", step.start !== null && step.end !== null ? cairn.seconds((step.end - step.start) * 1000) : "");
    summaryNode.replaceChildren(el("span", "idx", "#" + step.n), tools, tok, dur);
    step.node.classList.toggle("has-error", errors);
  }

  function pre(className, text) { return el("pre", className, text === null || text === undefined ? "" : text); }

  function drawBody(step) {
    var body = step.node.lastChild, parts = [];
    step.messages.forEach(function (m) {
      var box = el("div", "msg");
      box.appendChild(el("div", "label", "message (" + m.source + ")"));
      box.appendChild(pre(null, m.text));
      parts.push(box);
    });
    step.notices.forEach(function (text) { parts.push(el("p", "notice", "! " + text)); });
    if (step.text) {
      parts.push(el("div", "label", "assistant"));
      parts.push(pre("assistant", step.text));
    }
    step.calls.forEach(function (c) {
      var box = el("div", c.error ? "call error" : "call");
      box.dataset.tool = c.name;
      box.dataset.call = c.id;
      box.appendChild(el("span", "tool-name", c.name));
      if (c.line !== c.name) { box.appendChild(el("span", "call-line", " " + c.line)); }
      if (c.duration_ms !== null) { box.appendChild(el("span", "meta", " " + (c.duration_ms / 1000).toFixed(2) + "s")); }
      if (c.error) { box.appendChild(el("span", "mark-err", " ✗ error")); }
      if (c.waiting) { box.appendChild(el("span", "meta", " ? waits for approval")); }
      else if (!c.finished) { box.appendChild(el("span", "meta", " … running")); }
      if (c.offloaded_to) {
        box.appendChild(el("span", "mark-off", " ⇢ offloaded to "));
        var open = el("button", "link", c.offloaded_to);
        open.type = "button";
        open.addEventListener("click", function () { viewFile(c.offloaded_to); });
        box.appendChild(open);
      }
      box.appendChild(el("div", "label", "arguments"));
      box.appendChild(pre(null, c.arguments));
      if (!c.finished && !c.waiting && (c.live !== null || LIVE_TOOLS[c.name])) {
        box.appendChild(el("div", "label", c.name === "shell_exec" ? "output so far" : "the session's screen"));
        c.liveNode = pre("live-output", c.live || "");
        box.appendChild(c.liveNode);
        requestAnimationFrame(function () { c.liveNode.scrollTop = c.liveNode.scrollHeight; });
      }
      if (c.finished) {
        box.appendChild(el("div", "label", "result"));
        box.appendChild(pre("result", c.result));
      }
      if (asked[c.id] || answered[c.id]) {
        box.appendChild(el("p", "approval meta", (asked[c.id] ? "? asked: " + asked[c.id] + " · " : "") +
                                                 (answered[c.id] || "not answered")));
      }
      parts.push(box);
    });
    var more = el("p", "meta");
    var whole = el("button", "small", "the step whole");
    whole.type = "button";
    var wholeText = pre("whole", null);
    wholeText.hidden = true;
    whole.addEventListener("click", function () {
      fetch(base + "/steps/" + step.n, { credentials: "same-origin" }).then(function (r) { return r.text(); })
        .then(function (text) { cairn.text(wholeText, text); wholeText.hidden = false; });
    });
    more.appendChild(whole);
    var diffText = pre("diff", null);
    diffText.hidden = true;
    if (step.changed) {
      var diff = el("button", "small", "diff of this step");
      diff.type = "button";
      diff.addEventListener("click", function () {
        cairn.api(base + "/diff?step=" + step.n).then(function (d) {
          cairn.text(diffText, (d.text || "(no changes)") + (d.cut ? "\n" + d.cut : ""));
          diffText.hidden = false;
        }, function (e) { cairn.text(diffText, e.message); diffText.hidden = false; });
      });
      more.appendChild(diff);
    }
    var s = step.spent;
    more.appendChild(document.createTextNode(" usage: " + cairn.number(s.prompt) + " prompt, " + cairn.number(s.cached) +
                                             " cached, " + cairn.number(s.completion) + " completion tokens"));
    parts.push(more, wholeText, diffText);
    body.replaceChildren.apply(body, parts);
  }

  function drawTotals() {
    var meta = document.getElementById("meta"), ratio = totals.prompt ? totals.cached / totals.prompt : 0;
    var bits = [
      summary && summary.model ? "model " + summary.model : null,
      summary ? "started " + cairn.when(summary.started) : null,
      order.length + " steps",
      cairn.number(totals.prompt) + " prompt tokens (" + cairn.percent(ratio) + " cached)",
      cairn.number(totals.completion) + " completion tokens",
      totals.costKnown ? "$" + totals.cost.toFixed(4) : "cost unknown",
      summary && summary.check ? "check " + summary.check : null
    ];
    meta.replaceChildren.apply(meta, bits.filter(Boolean).map(function (b) { return el("span", null, b); }));
  }

  function setStatus(status) {
    var badge = document.getElementById("status"), failedCheck = status === "done" && summary && summary.check === "failed";
    cairn.text(badge, failedCheck ? "done · check failed" : status);  // a check that failed is not a green "done"
    badge.className = "badge " + (failedCheck ? "check-failed" : status);
    document.body.dataset.status = status;
  }

  // The running call's output: appended (a command) or drawn anew (a session's screen), shown in its
  // call's box (the newest step is open while the run is live), its end in view.
  function output(o) {
    var c = calls[o.id];
    if (!c || c.finished) { return; }
    var text = (o.replace || c.live === null ? "" : c.live) + o.text;
    c.live = text.length > LIVE_CHARS ? text.slice(text.length - LIVE_CHARS) : text;
    var node = c.liveNode;
    if (node && node.isConnected) {
      var atEnd = node.scrollTop + node.clientHeight >= node.scrollHeight - 4;
      cairn.text(node, c.live);
      if (atEnd) { node.scrollTop = node.scrollHeight; }
    } else {
      touch(c.step);
    }
    document.body.dataset.outputs = String(Number(document.body.dataset.outputs || 0) + 1);
  }

  // -- the stream -----------------------------------------------------------------------------------

  function drain() {
    scheduled = false;
    var started = performance.now();
    while (queue.length && performance.now() - started < 30) {  // a frame's worth, then let the page breathe
      var chunk = queue.splice(0, 500);
      chunk.forEach(fold);
    }
    drawSteps();
    if (queue.length) {
      schedule();
    } else if (caughtUp && !document.body.dataset.caughtUp) {
      document.body.dataset.caughtUp = "1";
      requestAnimationFrame(function () {  // the log so far on screen, in ms since the page was asked for
        setTimeout(function () { document.body.dataset.shownMs = String(Math.round(performance.now())); }, 0);
      });
    }
  }

  function schedule() {
    if (!scheduled) { scheduled = true; requestAnimationFrame(drain); }
  }

  var source = new EventSource(base + "/events");
  source.addEventListener("items", function (e) {
    var items = JSON.parse(e.data);
    for (var i = 0; i < items.length; i++) { queue.push(items[i]); }
    schedule();
  });
  source.addEventListener("output", function (e) {  // in the items' order: its call is folded first
    queue.push({ t: "output", output: JSON.parse(e.data) });
    schedule();
  });
  source.addEventListener("caught-up", function () {
    if (!caughtUp) { refresh.charts(); }  // once the log so far is read; then as it grows
    caughtUp = true;
    document.getElementById("waiting-events").hidden = true;
    schedule();
  });
  source.addEventListener("error", function () { cairn.text(document.getElementById("live"), "(reconnecting…)"); });
  source.addEventListener("open", function () { cairn.text(document.getElementById("live"), ""); });

  // -- what is read apart from the stream ------------------------------------------------------------

  var timers = {};
  function refreshSoon(what) {
    if (timers[what]) { return; }
    var wait = { summary: 150, todo: 500, files: 1500, charts: 4000 }[what];  // the charts walk the whole log
    timers[what] = setTimeout(function () { timers[what] = null; refresh[what](); }, wait);
  }

  var chartVersion = 0;
  var refresh = {
    summary: function () {
      return cairn.api(base).then(function (s) {
        summary = s;
        setStatus(s.status);
        sendPlan(s.send);
        openNewest();
        var reason = document.getElementById("reason");
        reason.hidden = !s.reason;
        reason.className = "banner " + s.status;
        cairn.text(reason, s.reason ? s.status + ": " + s.reason : "");
        cairn.text(document.getElementById("live"), s.live ? "live" : "");
        document.getElementById("stop").hidden = !s.can.stop;
        document.getElementById("resume").hidden = !s.can.resume;
        var approval = document.getElementById("approval");
        approval.hidden = !s.can.approve;
        if (s.approval) {
          cairn.text(document.getElementById("approval-what"), s.approval.name + " " + s.approval.what);
          cairn.text(document.getElementById("approval-why"), "(" + s.approval.why + ")");
        }
        drawTotals();
        document.body.dataset.ready = "1";
      }, function (e) { cairn.flash(e.message, true); });
    },
    charts: function () {
      chartVersion += 1;
      document.getElementById("chart-tokens").src = base + "/chart/tokens.svg?v=" + chartVersion;
      document.getElementById("chart-time").src = base + "/chart/time.svg?v=" + chartVersion;
    },
    todo: function () {
      cairn.api(base + "/todo").then(function (t) {
        var box = document.getElementById("todo");
        cairn.text(box, t.text === null ? "(no todo.md)" : t.text);
        box.className = t.text === null ? "meta" : "";
      });
    },
    files: function () {
      cairn.api(base + "/files").then(function (list) {
        var table = el("table"), body = el("tbody");
        list.files.forEach(function (f) {
          var tr = el("tr"), name = el("td", "path"), open = el("button", "link", f.path + (f.link ? " →" : ""));
          open.type = "button";
          open.dataset.path = f.path;
          open.addEventListener("click", function () { viewFile(f.path); });
          name.appendChild(open);
          tr.appendChild(name);
          tr.appendChild(el("td", "num meta", cairn.number(f.size)));
          body.appendChild(tr);
        });
        table.appendChild(body);
        var box = document.getElementById("files");
        box.replaceChildren(table);
        if (list.cut) { box.appendChild(el("p", "meta", "(only the first " + list.files.length + " files)")); }
        if (!list.files.length) { box.replaceChildren(el("p", "meta", "(no files)")); }
      });
    }
  };

  function viewFile(path) {
    var root = "workspace";
    if (path.indexOf("/cairn/") === 0) { root = "cairn"; path = path.slice("/cairn/".length); }
    var query = "?root=" + root + "&path=" + encodeURIComponent(path);
    var viewer = document.getElementById("viewer"), error = document.getElementById("viewer-error");
    var image = document.getElementById("viewer-image"), text = document.getElementById("viewer-text");
    viewer.hidden = false;
    cairn.text(document.getElementById("viewer-path"), (root === "cairn" ? "/cairn/" : "") + path);
    error.hidden = image.hidden = text.hidden = true;
    cairn.api(base + "/file" + query).then(function (f) {
      if (f.image) {
        image.src = base + "/raw" + query;
        image.hidden = false;
      } else if (f.binary) {
        cairn.text(text, "(a binary file of " + cairn.number(f.size) + " bytes)");
        text.hidden = false;
      } else {
        var lines = f.text.split("\n"), width = String(lines.length).length;
        if (lines.length > 1 && lines[lines.length - 1] === "") { lines.pop(); }
        cairn.text(text, lines.map(function (line, i) { return String(i + 1).padStart(width, " ") + "  " + line; }).join("\n") +
                           (f.cut ? "\n… (cut at 2 MiB of " + cairn.number(f.size) + " bytes)" : ""));
        text.hidden = false;
      }
      viewer.dataset.state = "shown";
    }, function (e) {
      cairn.text(error, e.message);
      error.hidden = false;
      viewer.dataset.state = "refused";
    });
  }

  // -- the buttons ----------------------------------------------------------------------------------

  function act(button, path, body, after) {
    button.disabled = true;
    cairn.flash("…");
    cairn.post(base + path, body).then(function (answer) {
      cairn.flash(answer.said);
      if (after) { after(); }
    }, function (e) { cairn.flash(e.message, true); }).then(function () {
      button.disabled = false;
      refresh.summary();
    });
  }

  // The one box: what Send does on this run is said under it before it is pressed (actions.send_plan).
  var message = document.getElementById("message");
  function sendPlan(plan) {
    var hint = document.getElementById("send-hint"), button = document.getElementById("send");
    cairn.text(hint, plan.hint);
    button.dataset.does = plan.does || "";
    button.disabled = !plan.does;
    message.placeholder = { say: "an instruction: the agent sees it at its next step", answer: "your answer to the agent's question",
                            "follow-up": "what the agent should do next" }[plan.does] || "";
  }
  document.getElementById("send").addEventListener("click", function (e) {
    act(e.target, "/say", { text: message.value }, function () { message.value = ""; });
  });
  document.getElementById("stop").addEventListener("click", function (e) { act(e.target, "/stop", {}); });
  document.getElementById("resume").addEventListener("click", function (e) {
    act(e.target, "/resume", { message: message.value }, function () { message.value = ""; });
  });
  document.getElementById("approve").addEventListener("click", function (e) { act(e.target, "/answer", { approve: true }); });
  document.getElementById("deny").addEventListener("click", function (e) {
    act(e.target, "/answer", { approve: false, reason: document.getElementById("deny-reason").value });
  });
  document.getElementById("refresh-files").addEventListener("click", function () { refresh.files(); });

  var all = function (open) { order.forEach(function (n) { steps[n].node.open = open; }); };
  document.getElementById("expand-all").addEventListener("click", function () { all(true); });
  document.getElementById("collapse-all").addEventListener("click", function () { all(false); });
  document.getElementById("errors-only").addEventListener("change", function (e) {
    document.body.classList.toggle("errors-only", e.target.checked);
  });

  refresh.summary();
  refresh.todo();
  refresh.files();
  setInterval(function () { if (summary && summary.live) { refresh.summary(); } }, 5000);
})();
