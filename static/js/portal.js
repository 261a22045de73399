// Behaviour the templates ask for with data- attributes, so that no page needs an inline script or an on…=
// handler (the Content-Security-Policy allows scripts from our static files only). Listeners sit on the
// document, so content that htmx swaps in later behaves the same without being wired again.
(function () {
  // <form data-confirm="…">: ask before sending. <form data-navigate>: go to the URL its <select> holds.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      return;
    }
    if (form.hasAttribute("data-navigate")) {
      var select = form.querySelector("select");
      if (select) { event.preventDefault(); window.location.href = select.value; }
    }
  });

  // <button data-confirm="…">: ask before this one button sends its form.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-confirm]") : null;
    if (button && !window.confirm(button.dataset.confirm)) { event.preventDefault(); }
  });

  // <select data-navigate>: choosing an option whose value is a URL goes there.
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (select.matches && select.matches("select[data-navigate]")) { window.location.href = select.value; }
  });

  // A 429 from a page throttle (portal/page_throttles.py) carries a short message for the spot htmx fills;
  // htmx leaves error answers unswapped unless told (htmx docs: "Modifying Swapping Behavior With Events").
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.xhr.status === 429) { event.detail.shouldSwap = true; event.detail.isError = false; }
  });
})();
