// cbdash dashboard: show when the live socket is down (the htmx websocket
// extension reconnects by itself) and keep the operator form's scope in
// step with the control the user touched; tick relative times (elements
// with data-since count up from, data-until down to, an RFC 3339 time),
// formatted as the server's spanText. No inline script anywhere.
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
})();
