// cbdash dashboard: show when the live socket is down (the htmx websocket
// extension reconnects by itself) and keep the operator form's scope in
// step with the control the user touched; tick relative times (elements
// with data-since count up from, data-until down to, an RFC 3339 time),
// formatted as the server's wording.Span. No inline script anywhere.
(function () {
  "use strict";
  function banner(show) {
    var el = document.getElementById("conn");
    if (el) { el.hidden = !show; }
    document.body.classList.toggle("offline", show);
  }
  document.addEventListener("htmx:wsOpen", function () { banner(false); });
  document.addEventListener("htmx:wsClose", function () { banner(true); });
  document.addEventListener("htmx:wsError", function () { banner(true); });

  document.addEventListener("change", function (ev) {
    var t = ev.target;
    if (!t || !t.form || !t.form.matches("[data-testid=operator-form]")) { return; }
    var scope = null;
    if (t.name === "instance") { scope = "instance"; }
    if (t.name === "share") { scope = "share"; }
    if (scope) {
      var r = t.form.querySelector("input[name=scope][value=" + scope + "]");
      if (r) { r.checked = true; }
    }
  });

  function pad(n) { return n < 10 ? "0" + n : "" + n; }
  function spanText(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) { return s + "s"; }
    if (s < 3600) { return Math.floor(s / 60) + "m" + pad(s % 60) + "s"; }
    if (s < 48 * 3600) { return Math.floor(s / 3600) + "h" + pad(Math.floor(s % 3600 / 60)) + "m"; }
    return Math.floor(s / 86400) + "d" + Math.floor(s % 86400 / 3600) + "h";
  }
  // The server's clock minus the browser's, from the page's render.
  var skew = 0;
  var meta = document.querySelector("meta[name=cbdash-now]");
  if (meta) {
    var t0 = Date.parse(meta.getAttribute("content"));
    if (!isNaN(t0)) { skew = t0 - Date.now(); }
  }
  function tick() {
    var now = Date.now() + skew;
    document.querySelectorAll("[data-since]").forEach(function (el) {
      var t = Date.parse(el.getAttribute("data-since"));
      if (!isNaN(t)) { el.textContent = spanText(now - t); }
    });
    document.querySelectorAll("[data-until]").forEach(function (el) {
      var t = Date.parse(el.getAttribute("data-until"));
      if (!isNaN(t)) { el.textContent = spanText(t - now); }
    });
  }
  setInterval(tick, 1000);

  // Re-sort the overview's tiles to the order the live socket sent
  // (#tile-order), each within its group. A tile that moved takes its new
  // place at once and is marked there (a short outline and fade-in): it
  // never slides across the others, so at no moment does one tile cover
  // another and a click lands on the tile drawn under the pointer.
  var lastOrder = null;
  function applyOrder() {
    var el = document.getElementById("tile-order");
    if (!el) { return; }
    var order = el.getAttribute("data-order") || "";
    if (order === lastOrder) { return; }
    lastOrder = order;
    var rank = {};
    order.split(" ").forEach(function (id, i) { rank[id] = i; });
    var still = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    document.querySelectorAll(".tiles").forEach(function (grid) {
      var tiles = Array.prototype.slice.call(grid.children);
      var before = {};
      tiles.forEach(function (t) { before[t.id] = t.getBoundingClientRect(); });
      var sorted = tiles.slice().sort(function (a, b) {
        var ra = a.id in rank ? rank[a.id] : 1e9, rb = b.id in rank ? rank[b.id] : 1e9;
        return ra - rb;
      });
      var moved = sorted.some(function (t, i) { return t !== tiles[i]; });
      if (!moved) { return; }
      sorted.forEach(function (t) { grid.appendChild(t); });
      if (still) { return; }
      sorted.forEach(function (t) {
        var a = before[t.id], b = t.getBoundingClientRect();
        if (!a || (a.left === b.left && a.top === b.top) || !t.animate) { return; }
        // The Web Animations API, not a style attribute: the CSP forbids
        // inline style. Opacity and outline only: the tile's box stays put.
        t.animate([{ opacity: 0.35, outlineColor: "var(--c1)" }, { opacity: 1, outlineColor: "transparent" }],
          { duration: 600, easing: "ease-out" });
      });
    });
  }
  document.addEventListener("htmx:wsAfterMessage", applyOrder);

  // The operator panel's instance list is resent live: keep the choice.
  var chosen = null;
  document.addEventListener("htmx:wsBeforeMessage", function () {
    var sel = document.getElementById("op-instance");
    chosen = sel ? sel.value : null;
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    var sel = document.getElementById("op-instance");
    if (sel && chosen !== null && sel.value !== chosen && sel.querySelector("option[value='" + CSS.escape(chosen) + "']")) {
      sel.value = chosen;
    }
  });
})();
