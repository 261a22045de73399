// The submit page: show only the fields of the chosen way of asking; without JavaScript every field stays
// visible and the server ignores the others.
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
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
