// Shared by the pages of `cairn serve`. Whatever comes from a run is put in the page as text
// (textContent, element by element, through `shown`), never as markup.
"use strict";

var cairn = (function () {
  // Bidirectional controls (embeddings, overrides, isolates, marks) would make a command or a file show
  // as something else than it is: each is shown as its code, [U+202E], as on the terminal.
  var BIDI = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/g;
  function shown(text) {
    return String(text).replace(BIDI, function (c) {
      return "[U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "]";
    });
  }

  function text(node, value) { node.textContent = value === undefined || value === null ? "" : shown(value); }

  function el(tag, className, value) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (value !== undefined && value !== null) { text(node, value); }
    return node;
  }

  function api(path) {
    return fetch(path, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body && body.error ? body.error : r.status + " " + r.statusText); }
        return body;
      }, function () { throw new Error(r.status + " " + r.statusText); });
    });
  }

  function post(path, body) {
    return fetch(path, {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {})
    }).then(function (r) {
      return r.json().catch(function () { return { ok: false, error: r.status + " " + r.statusText }; })
        .then(function (answer) {
          if (!r.ok || !answer.ok) { throw new Error(answer.error || r.status + " " + r.statusText); }
          return answer;
        });
    });
  }

  function flash(message, bad) {
    var box = document.getElementById("flash");
    if (!box) { return; }
    text(box, message);
    box.className = bad ? "flash bad" : "flash";
  }

  var numbers = new Intl.NumberFormat("en-US");  // one formatter: toLocaleString makes one a call
  function number(n) { return n === null || n === undefined ? "-" : numbers.format(n); }
  function cost(usd) { return usd === null || usd === undefined ? "unknown" : "$" + Number(usd).toFixed(4); }
  function percent(ratio) { return Math.round((ratio || 0) * 100) + "%"; }
  function seconds(ms) {  // as the report says it (inspect/report_time.seconds)
    if (ms === null || ms === undefined) { return "?"; }
    var s = ms / 1000;
    if (s < 10) { return s.toFixed(2) + " s"; }
    if (s < 60) { return s.toFixed(1) + " s"; }
    if (s < 3600) { return Math.floor(s / 60) + " min " + String(Math.floor(s % 60)).padStart(2, "0") + " s"; }
    return Math.floor(s / 3600) + " h " + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + " min";
  }
  function when(epoch) {
    if (!epoch) { return "?"; }
    var d = new Date(epoch * 1000);
    function two(n) { return String(n).padStart(2, "0"); }
    return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " + two(d.getHours()) + ":" + two(d.getMinutes());
  }

  // A run's status as a badge; a run that is done but whose check failed says so (it is no green "done").
  function badge(status, check) {
    var failedCheck = status === "done" && check === "failed";
    var node = el("span", "badge " + (failedCheck ? "check-failed" : status), failedCheck ? "done · check failed" : status);
    if (failedCheck) { node.title = "the agent said it is done; the check failed"; }
    return node;
  }

  window.addEventListener("error", function (e) {
    var errors = document.body.dataset.errors ? document.body.dataset.errors + " | " : "";
    document.body.dataset.errors = errors + String(e.message || e);
  });

  return { el: el, text: text, shown: shown, api: api, post: post, flash: flash, number: number, cost: cost,
           percent: percent, seconds: seconds, when: when, badge: badge };
})();
