// keadm-batch report.html: filters, sorts, groups and zooms the rows the page already
// holds. It reads node text only through dataset and textContent, and writes none as
// markup, so a hostile node's name stays text.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var timeline = $("timeline");
  var rowsBox = $("rows");
  var rows = Array.prototype.slice.call(rowsBox.querySelectorAll(".node-row"));
  var span = parseFloat(timeline.dataset.span) || 1;
  var controls = {
    text: $("filter-text"), outcome: $("filter-outcome"), cls: $("filter-class"),
    site: $("filter-site"), group: $("group-by"), sort: $("sort-by"),
    from: $("zoom-from"), to: $("zoom-to")
  };
  var searchable = rows.map(function (row) {
    var error = row.querySelector(".node-error");
    return (row.dataset.name + " " + row.dataset.address + " " +
      (error ? error.title || error.textContent : "")).toLowerCase();
  });
  var order = { succeeded: 4, failed: 0, timed_out: 1, interrupted: 2, skipped: 3 };
  var keys = {
    start: function (r) { return parseFloat(r.dataset.start); },
    name: function (r) { return r.dataset.name; },
    duration: function (r) { return -parseFloat(r.dataset.duration); },
    outcome: function (r) { return order[r.dataset.outcome]; }
  };
  var compare = function (a, b) { return a < b ? -1 : a > b ? 1 : 0; };

  function value(control) { return control ? control.value : ""; }

  function filter() {
    var text = value(controls.text).trim().toLowerCase();
    var outcome = value(controls.outcome), cls = value(controls.cls), site = value(controls.site);
    var shown = 0;
    rows.forEach(function (row, i) {
      var show = (!text || searchable[i].indexOf(text) >= 0) &&
        (!outcome || row.dataset.outcome === outcome) &&
        (!cls || row.dataset.class === cls) &&
        (!site || row.dataset.site === site);
      row.hidden = !show;
      if (show) { shown += 1; }
    });
    $("shown-count").textContent = shown + " of " + rows.length + " nodes";
    groupCounts();
  }

  function arrange() {
    var key = keys[value(controls.sort)] || keys.start;
    var group = value(controls.group);
    var indexed = rows.map(function (row, i) { return [row, i]; });
    indexed.sort(function (a, b) {
      var g = group === "none" || !group ? 0 :
        compare(groupKey(a[0], group), groupKey(b[0], group));
      return g || compare(key(a[0]), key(b[0])) || a[1] - b[1];
    });
    rowsBox.querySelectorAll(".group-row").forEach(function (g) { g.remove(); });
    var fragment = document.createDocumentFragment();
    var current = null;
    indexed.forEach(function (pair) {
      var row = pair[0];
      if (group && group !== "none") {
        var k = row.dataset[group];
        if (k !== current) {
          current = k;
          var header = document.createElement("div");
          header.className = "group-row";
          header.dataset.group = k;
          header.textContent = label(group, k);
          fragment.appendChild(header);
        }
      }
      fragment.appendChild(row);
    });
    rowsBox.appendChild(fragment);
    groupCounts();
  }

  function groupKey(row, group) {
    var k = row.dataset[group];
    return group === "wave" ? (k === "" ? Infinity : parseInt(k, 10)) : (k === "" ? "\uffff" : k);
  }

  function label(group, k) {
    if (k === "") { return group === "site" ? "(no site)" : "(no wave)"; }
    return group === "site" ? "site " + k : "wave " + k;
  }

  function groupCounts() {
    var group = value(controls.group);
    rowsBox.querySelectorAll(".group-row").forEach(function (header) {
      var k = header.dataset.group, all = 0, shown = 0;
      rows.forEach(function (row) {
        if (row.dataset[group] === k) { all += 1; if (!row.hidden) { shown += 1; } }
      });
      header.textContent = label(group, k) + ": " + shown + " of " + all + " nodes";
      header.hidden = shown === 0;
    });
  }

  function zoom(from, to) {
    from = Math.max(0, isFinite(from) ? from : 0);
    to = Math.min(span, isFinite(to) ? to : span);
    if (!(to > from)) { from = 0; to = span; }
    timeline.style.setProperty("--t0", from);
    timeline.style.setProperty("--span", to - from);
    controls.from.value = +from.toFixed(3);
    controls.to.value = +to.toFixed(3);
    drawTicks(from, to);
  }

  function drawTicks(from, to) {
    var axis = $("axis");
    axis.querySelectorAll(".tick").forEach(function (t) { t.remove(); });
    for (var i = 0; i <= 8; i += 1) {
      var at = from + (to - from) * i / 8;
      var tick = document.createElement("span");
      tick.className = "tick";
      tick.style.setProperty("--s", at);
      tick.textContent = at < 60 ? at.toFixed(1) + " s" :
        Math.floor(at / 60) + "m" + ("0" + Math.floor(at % 60)).slice(-2) + "s";
      axis.appendChild(tick);
    }
  }

  function save() {
    var state = new URLSearchParams();
    [["q", controls.text], ["outcome", controls.outcome], ["class", controls.cls],
      ["site", controls.site], ["group", controls.group], ["sort", controls.sort]].forEach(function (p) {
      if (p[1] && p[1].value && p[1].value !== "none" && p[1].value !== "start") { state.set(p[0], p[1].value); }
    });
    var from = parseFloat(controls.from.value), to = parseFloat(controls.to.value);
    if (from > 0 || to < span) { state.set("from", from); state.set("to", to); }
    var hash = state.toString();
    history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
  }

  function restore() {
    var state = new URLSearchParams(location.hash.slice(1));
    [["q", controls.text], ["outcome", controls.outcome], ["class", controls.cls],
      ["site", controls.site], ["group", controls.group], ["sort", controls.sort]].forEach(function (p) {
      if (p[1] && state.has(p[0])) { p[1].value = state.get(p[0]); }
    });
    if (state.has("from")) { zoom(parseFloat(state.get("from")), parseFloat(state.get("to"))); }
  }

  // Dragging across the axis zooms into the range dragged.
  (function brush() {
    var axis = $("axis"), start = null, box = null;
    var at = function (event) {
      var r = axis.getBoundingClientRect();
      var from = parseFloat(controls.from.value) || 0, to = parseFloat(controls.to.value) || span;
      return from + Math.min(1, Math.max(0, (event.clientX - r.left) / r.width)) * (to - from);
    };
    var x = function (event) { return event.clientX - axis.getBoundingClientRect().left; };
    axis.addEventListener("mousedown", function (event) {
      start = { t: at(event), x: x(event) };
      box = document.createElement("div");
      box.className = "brush";
      box.style.left = start.x + "px";
      box.style.width = "0";
      axis.appendChild(box);
      event.preventDefault();
    });
    document.addEventListener("mousemove", function (event) {
      if (!start) { return; }
      var now = x(event);
      box.style.left = Math.min(start.x, now) + "px";
      box.style.width = Math.abs(now - start.x) + "px";
    });
    document.addEventListener("mouseup", function (event) {
      if (!start) { return; }
      var end = at(event);
      box.remove();
      if (Math.abs(x(event) - start.x) > 3) {
        zoom(Math.min(start.t, end), Math.max(start.t, end));
        save();
      }
      start = null;
    });
  })();

  controls.text.addEventListener("input", function () { filter(); save(); });
  [controls.outcome, controls.cls, controls.site].forEach(function (c) {
    if (c) { c.addEventListener("change", function () { filter(); save(); }); }
  });
  [controls.group, controls.sort].forEach(function (c) {
    c.addEventListener("change", function () { arrange(); save(); });
  });
  [controls.from, controls.to].forEach(function (c) {
    c.addEventListener("change", function () {
      zoom(parseFloat(controls.from.value), parseFloat(controls.to.value));
      save();
    });
  });
  $("zoom-reset").addEventListener("click", function () { zoom(0, span); save(); });
  $("controls").addEventListener("submit", function (event) { event.preventDefault(); });

  restore();
  arrange();
  filter();
})();
