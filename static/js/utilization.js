// The team dashboard's utilization graph: allocated (solid) and used (dotted) GPU-equivalents per GPU class,
// from the series the page carries in <script id="utilization-data" type="application/json">.
// plotly.js is the project's own copy (static/vendor/plotly.min.js), loaded with defer before this file.
(function () {
  function draw() {
    var source = document.getElementById("utilization-data");
    if (!source || typeof Plotly === "undefined") { return; }
    var series = JSON.parse(source.textContent);
    var colours = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"];
    var traces = [];
    series.forEach(function (s, i) {
      var c = colours[i % colours.length];
      traces.push({x: s.t, y: s.allocated, name: s.gpu_class + " allocated", type: "scatter", mode: "lines", line: {color: c, width: 2}});
      traces.push({x: s.t, y: s.used, name: s.gpu_class + " used", type: "scatter", mode: "lines", line: {color: c, dash: "dot", width: 2}, connectgaps: false});
    });
    Plotly.newPlot("utilization-graph", traces, {
      margin: {l: 50, r: 10, t: 10, b: 40}, yaxis: {title: {text: "GPU-equivalents"}, rangemode: "tozero"},
      legend: {orientation: "h"}, hovermode: "x unified"
    }, {responsive: true, displaylogo: false});
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
