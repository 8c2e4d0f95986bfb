/* Conveyor dashboard behaviour (no inline scripts: the CSP allows only files from 'self').
 *
 * - Time zone toggle: every <time class="ts" data-ts="EPOCH"> is rendered in UTC by the server;
 *   "Local" rewrites them in the browser's time zone. The choice is remembered per browser in
 *   localStorage ("conveyor.tz") and re-applied to content htmx or live updates swap in. Chart
 *   time labels and bar titles (svg.chart [data-ts][data-fmt], data-tail) and the legend's
 *   .tz-legend follow it too.
 * - Bulk selection: "select all" ticks every job checkbox of the page; the count of selected
 *   jobs is shown and the "selected" bulk buttons are disabled while nothing is ticked.
 */
(function () {
  "use strict";
  var KEY = "conveyor.tz";

  function mode() {
    try { return localStorage.getItem(KEY) === "local" ? "local" : "utc"; } catch (e) { return "utc"; }
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function format(date, local) {
    if (local) {
      return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
        pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
    }
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) + " " +
      pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + ":" + pad(date.getUTCSeconds());
  }

  var DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

  // a chart's time label (charts.py time_label): "hm" = HH:MM, "dhm" = "Ddd DD HH:MM"
  function chartLabel(date, fmt, local) {
    var hm = local ? pad(date.getHours()) + ":" + pad(date.getMinutes())
      : pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes());
    if (fmt !== "dhm") { return hm; }
    var day = local ? date.getDay() : date.getUTCDay();
    return DAYS[day] + " " + pad(local ? date.getDate() : date.getUTCDate()) + " " + hm;
  }

  function applyCharts(root, local) {
    var marks = (root || document).querySelectorAll("svg.chart [data-ts][data-fmt]");
    var zone = local ? zoneName() : "UTC";
    for (var i = 0; i < marks.length; i++) {
      var m = marks[i];
      var seconds = parseFloat(m.getAttribute("data-ts"));
      if (!isFinite(seconds)) { continue; }
      var text = chartLabel(new Date(seconds * 1000), m.getAttribute("data-fmt"), local);
      if (m.hasAttribute("data-tail")) { text += " " + zone + m.getAttribute("data-tail"); }
      if (m.textContent !== text) { m.textContent = text; }
    }
    var legends = document.querySelectorAll(".tz-legend");
    for (var j = 0; j < legends.length; j++) {
      if (legends[j].textContent !== "times in " + zone) { legends[j].textContent = "times in " + zone; }
    }
  }

  function zoneName() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || "local"; } catch (e) { return "local"; }
  }

  function applyTimes(root) {
    var local = mode() === "local";
    var times = (root || document).querySelectorAll("time.ts[data-ts]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var seconds = parseFloat(t.getAttribute("data-ts"));
      if (!isFinite(seconds)) { continue; }
      var text = format(new Date(seconds * 1000), local);
      if (t.textContent !== text) { t.textContent = text; }
      t.title = local ? format(new Date(seconds * 1000), false) + " UTC" : "";
    }
    applyCharts(root, local);
    var names = document.querySelectorAll(".tz-name");
    var label = local ? zoneName() : "UTC";
    for (var j = 0; j < names.length; j++) {
      if (names[j].textContent !== label) { names[j].textContent = label; }
    }
    var buttons = document.querySelectorAll(".tz-toggle button[data-tz]");
    for (var k = 0; k < buttons.length; k++) {
      var on = buttons[k].getAttribute("data-tz") === mode();
      buttons[k].setAttribute("aria-pressed", on ? "true" : "false");
    }
  }

  function boxes() { return document.querySelectorAll('input[type=checkbox][name=ids][form="bulk-form"]'); }

  function updateSelection() {
    var all = boxes(), n = 0;
    for (var i = 0; i < all.length; i++) { if (all[i].checked) { n++; } }
    var count = document.getElementById("selected-count");
    if (count) { count.textContent = String(n); }
    var needs = document.querySelectorAll("[data-needs-selection]");
    for (var j = 0; j < needs.length; j++) { needs[j].disabled = n === 0; }
    var heads = document.querySelectorAll("input.select-all");
    for (var k = 0; k < heads.length; k++) {
      heads[k].checked = all.length > 0 && n === all.length;
      heads[k].indeterminate = n > 0 && n < all.length;
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest(".tz-toggle button[data-tz]");
    if (!button) { return; }
    try { localStorage.setItem(KEY, button.getAttribute("data-tz")); } catch (e) { /* private mode */ }
    applyTimes(document);
  });

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.classList && target.classList.contains("select-all")) {
      var all = boxes();
      for (var i = 0; i < all.length; i++) { all[i].checked = target.checked; }
    }
    if (target.name === "ids" || (target.classList && target.classList.contains("select-all"))) {
      updateSelection();
    }
  });

  var pending = false;
  new MutationObserver(function () {
    if (pending) { return; }
    pending = true;
    window.requestAnimationFrame(function () { pending = false; applyTimes(document); });
  }).observe(document.documentElement, { childList: true, subtree: true });

  applyTimes(document);
  updateSelection();
})();
