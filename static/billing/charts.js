// Draw every finance chart: an element with data-chart="ID" gets the figure in <script id="ID" type="application/json">.
// plotly.js is the project's own copy (static/vendor/plotly.min.js), loaded with defer before this file.
(function () {
  function draw() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      var source = document.getElementById(el.dataset.chart);
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(el, figure.data, figure.layout, { displaylogo: false, responsive: true });
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
