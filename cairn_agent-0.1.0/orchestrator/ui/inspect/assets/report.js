(function () {
  var errors = [];
  function note(message) { errors.push(String(message)); document.body.dataset.errors = errors.join(" | "); }
  window.addEventListener("error", function (e) { note(e.message || e); });
  try {
    var steps = document.querySelectorAll("details.step");
    document.getElementById("n-steps").textContent = String(steps.length);
    document.body.dataset.steps = String(steps.length);
    function setAll(open) { for (var i = 0; i < steps.length; i++) { steps[i].open = open; } }
    document.getElementById("expand-all").addEventListener("click", function () { setAll(true); });
    document.getElementById("collapse-all").addEventListener("click", function () { setAll(false); });
    document.getElementById("errors-only").addEventListener("change", function (e) {
      document.body.classList.toggle("errors-only", e.target.checked);
    });
    var data = null;
    function fill(box) {
      var pre = box.querySelector("pre.messages");
      if (!box.open || pre.dataset.filled) { return; }
      if (data === null) { data = JSON.parse(document.getElementById("requests-data").textContent); }
      var request = data.requests[Number(box.dataset.request)], messages = [];
      for (var i = 0; i < request.ranges.length; i++) {
        for (var k = 0; k < request.ranges[i][1]; k++) { messages.push(data.messages[request.ranges[i][0] + k]); }
      }
      pre.textContent = JSON.stringify(messages, null, 2);  // text, never markup
      pre.dataset.filled = "1";
    }
    var boxes = document.querySelectorAll("details.request");
    for (var b = 0; b < boxes.length; b++) {
      boxes[b].addEventListener("toggle", function (e) { fill(e.target); });
    }
    function openHash() {
      var target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
      for (var node = target; node && node.tagName; node = node.parentNode) {
        if (node.tagName === "DETAILS") { node.open = true; }
      }
      if (target && target.scrollIntoView) { target.scrollIntoView(); }
    }
    window.addEventListener("hashchange", openHash);
    openHash();
  } catch (e) {
    note(e && e.message ? e.message : e);
  }
  document.body.dataset.ready = "1";
})();
