"""The HTML report's inline style sheet, script and palette: the page loads nothing from anywhere."""

# Distinct on white, and told apart by the letter each cell carries, too.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#86bcb6", "#8cd17d", "#d37295")
OTHER_COLOUR = "#c8c8c8"

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1d1d1f;
 background:#fafafa}
main{padding:16px 24px;max-width:1800px}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:16px;margin:24px 0 8px}
h3{font-size:14px;margin:16px 0 4px;font-weight:600}
code,.ag-mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace;font-size:12px}
#ag-summary{font-size:15px;margin:4px 0 12px}
#ag-summary b.bad{color:#c62828}
#ag-summary b.good{color:#2e7d32}
.ag-files{color:#555;font-size:12px}
.ag-legend{display:flex;flex-wrap:wrap;gap:6px 14px;margin:8px 0 12px;font-size:12px}
.ag-legend span.sw{display:inline-block;width:18px;height:16px;border-radius:3px;text-align:center;
 color:#fff;font-weight:600;line-height:16px;margin-right:4px;vertical-align:middle}
.ag-wrap{display:flex;gap:16px;align-items:flex-start}
.ag-scroll{overflow:auto;max-height:78vh;max-width:calc(100vw - 440px);border:1px solid #ddd;background:#fff;flex:0 1 auto}
table.ag-grid{border-collapse:separate;border-spacing:1px;font-size:11px}
.ag-grid th{background:#fff;font-weight:normal;position:sticky}
.ag-grid thead th{top:0;z-index:2}
.ag-grid thead tr.ag-keys th{min-height:190px;vertical-align:bottom;padding:2px 0;border-bottom:2px solid #999}
.ag-grid thead tr.ag-keys th div{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;
 margin:0 auto}
.ag-grid thead tr.ag-keys.ag-numbered th{min-height:0;vertical-align:bottom;padding:2px 1px;font-size:10px}
.ag-keylist{columns:4 300px;column-gap:24px;font-size:12px;margin:8px 0;padding-left:34px}
.ag-keylist li{break-inside:avoid;overflow-wrap:anywhere}
.ag-keylist li.ag-dis,.ag-keylist li.ag-dis b{color:#c62828}
.ag-grid thead th.ag-corner{vertical-align:bottom;text-align:left;padding:2px 6px;color:#777}
.ag-grid th.ag-dis,.ag-grid thead th.ag-dis div{color:#c62828;font-weight:700}
.ag-grid tbody th{left:0;z-index:1;text-align:left;padding:0 8px 0 4px;white-space:nowrap}
.ag-grid tr.ag-node th{background:#eef1f5;font-weight:600;padding:3px 6px;color:#333;text-align:left}
.ag-grid tr.ag-dissent th{background:#fdecea;color:#b71c1c;font-weight:600}
.ag-grid td{width:24px;min-width:24px;height:22px;text-align:center;color:#fff;font-weight:600;cursor:pointer;
 border-radius:2px;font-size:11px}
.ag-grid td.ag-x{outline:2px solid #b71c1c;outline-offset:-2px}
.ag-grid td.ag-chg{outline:2px dashed #0d47a1;outline-offset:-2px}
.ag-grid td.ag-fb,.ag-legend span.sw.ag-fb{background-image:repeating-linear-gradient(135deg,transparent 0 3px,rgba(255,255,255,.55) 3px 5px)}
.ag-grid td.ag-none{background:#f0f0f0;color:#999;cursor:default}
.ag-grid td.ag-sel{outline:3px solid #000;outline-offset:-3px}
.ag-n{color:#777;font-weight:normal;margin-left:4px}
.ag-more{color:#555;font-size:12px;margin:6px 0}
#ag-detail{position:sticky;top:12px;width:360px;flex:0 0 360px;background:#fff;border:1px solid #ddd;
 padding:10px 12px;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere;min-height:80px}
#ag-detail b{display:block;margin-bottom:4px}
.ag-plots{display:flex;flex-wrap:wrap;gap:8px 28px}
.ag-plotbox{background:#fff;border:1px solid #e3e3e3;padding:4px 10px 8px}
.ag-plotbox p{margin:2px 0;font-size:12px;color:#444}
svg.ag-plot{display:block}
svg.ag-plot text{font:11px ui-monospace,"DejaVu Sans Mono",monospace;fill:#333}
svg.ag-plot .ag-tick{fill:#777;text-anchor:middle}
svg.ag-plot .ag-side{fill:#555}
svg.ag-plot .ag-note{fill:#777}
svg.ag-plot .ag-axis{stroke:#999}
svg.ag-plot .ag-grid{stroke:#eee}
svg.ag-plot .ag-won{stroke:#222;stroke-width:1}
svg.ag-plot .ag-lost{fill:none;stroke:#9a9a9a;stroke-width:1.2}
table.ag-known{border-collapse:collapse;background:#fff;font-size:12px;width:100%}
.ag-known th,.ag-known td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top;
 overflow-wrap:anywhere}
.ag-known th{background:#eef1f5;font-weight:600}
.ag-known .bad,.ag-notes{color:#c62828}
footer{color:#888;font-size:11px;margin:24px 0 8px}
#ag-errors:empty{display:none}
#ag-errors{background:#c62828;color:#fff;padding:8px;white-space:pre-wrap}
"""

# First thing in <body>: any script error on the page lands in #ag-errors (a test reads it).
ERROR_TRAP = """
window.onerror = function (message, source, line) {
  var box = document.getElementById("ag-errors");
  box.textContent += "script error: " + message + " (line " + line + ")\\n";
};
"""

# Last thing in <body>: a click on a cell shows its details; #ag-ready says the script ran.
SCRIPT = """
(function () {
  var detail = document.getElementById("ag-detail");
  var grid = document.getElementById("ag-grid");
  var selected = null;
  function show(cell) {
    var column = document.getElementById("ag-k" + cell.getAttribute("data-c"));
    var row = cell.parentNode.querySelector("th");
    if (selected) { selected.classList.remove("ag-sel"); }
    selected = cell;
    cell.classList.add("ag-sel");
    detail.textContent = "";
    var head = document.createElement("b");
    head.textContent = row.getAttribute("title") || row.textContent;
    detail.appendChild(head);
    detail.appendChild(document.createTextNode(
      (column ? column.getAttribute("title") : "") + "\\n\\n" + cell.getAttribute("title")));
  }
  if (grid) {
    grid.addEventListener("click", function (event) {
      var cell = event.target.closest("td[data-c]");
      if (cell) { show(cell); }
    });
  }
  // The first cell that differs from its column's reference config (else the first cell) is shown.
  var first = grid && (grid.querySelector("td.ag-x[data-c]") || grid.querySelector("td[data-c]"));
  if (first) { show(first); }
  var ready = document.createElement("div");
  ready.id = "ag-ready";
  ready.setAttribute("data-cells", grid ? grid.querySelectorAll("td[data-c]").length : 0);
  ready.hidden = true;
  document.body.appendChild(ready);
})();
"""
