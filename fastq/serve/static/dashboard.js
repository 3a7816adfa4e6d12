// fastq's dashboard: the charts (uPlot) of jobs done and failed per 10 s, read from
// /_/history and redrawn every 10 s. Everything else is htmx in the markup.
(function () {
  "use strict";
  function draw(box) {
    var url = box.getAttribute("data-history");
    var plot = null;
    function load() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (h) {
          if (!h) return;
          var data = [h.t, h.processed, h.failed];
          if (plot) { plot.setData(data); return; }
          plot = new uPlot({
            width: Math.max(box.clientWidth, 300), height: 200,
            series: [{}, { label: "done", stroke: "#2563eb", fill: "rgba(37,99,235,0.08)" },
                     { label: "failed", stroke: "#b91c1c" }],
            axes: [{}, { label: "jobs / 10 s" }],
          }, data, box);
          box.setAttribute("data-drawn", String(h.t.length));
        });
    }
    load();
    setInterval(load, 10000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-history]").forEach(draw);
    // a poll refused for want of a session (it lapsed, or the token changed): to the
    // login form, then back here
    document.body.addEventListener("htmx:responseError", function (e) {
      if (e.detail.xhr.status !== 401) return;
      // next: the page's path under the root (--root-path), as the login form takes it
      var root = document.body.getAttribute("data-root") || "";
      var here = location.pathname.slice(root.length) + location.search;
      var login = document.body.getAttribute("data-login");
      location.assign(login + "?next=" + encodeURIComponent(here || "/"));
    });
  });
})();
