// The submit page: show only the fields of the chosen way of asking (without JavaScript every field stays
// visible and the server ignores the others), and fill in the proposed checkpoint interval on request.
(function () {
  function start() {
    var form = document.getElementById("submit-form");
    if (!form) { return; }
    function sync() {
      var chosen = form.querySelector("input[name=request_by]:checked");
      form.querySelectorAll(".by").forEach(function (group) {
        group.hidden = chosen !== null && group.dataset.by !== chosen.value;
      });
    }
    form.addEventListener("change", sync);
    sync();
    // "Use it" beside the proposed checkpoint interval copies it into the field (the proposal is redrawn by
    // htmx, so the listener sits on the form).
    form.addEventListener("click", function (event) {
      var button = event.target.closest("[data-fill-interval]");
      var field = form.querySelector("input[name=checkpoint_interval_s]");
      if (!button || !field) { return; }
      field.value = button.dataset.fillInterval;
      field.dispatchEvent(new Event("change", { bubbles: true }));
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
