// cbdash dashboard: show when the live socket is down (the htmx websocket
// extension reconnects by itself) and keep the operator form's scope in
// step with the control the user touched. No inline script anywhere.
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
})();
