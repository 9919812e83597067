/* The memory page: draws the graph inlined by view.py with force-graph (canvas), most connected entities first.
   No network: everything it needs is in this file. Exposes what it shows on window.memoryView for tests. */
(function () {
  "use strict";

  var PAGE = 1000; // entities added at a time: the layout of a few thousand nodes settles in seconds
  var LAYOUT_LIMIT_MS = 20000; // the layout stops by then even if it has not cooled down
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#17becf", "#bcbd22", "#7f7f7f"];

  var raw = JSON.parse(document.getElementById("memory-data").textContent);
  var nodes = raw.entities.map(function (e, i) {
    return { id: i, name: e[0], type: e[1], obs: e[2], degree: 0, out: [], into: [] };
  });
  var links = raw.relations.map(function (r) {
    var link = { source: r[0], target: r[1], label: r[2] };
    nodes[r[0]].out.push(link);
    nodes[r[1]].into.push(link);
    nodes[r[0]].degree++;
    nodes[r[1]].degree++;
    return link;
  });
  var order = nodes.slice().sort(function (a, b) {
    return b.degree - a.degree || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  });
  var typeCounts = raw.types.map(function () { return 0; });
  nodes.forEach(function (n) { typeCounts[n.type]++; });
  var typeColors = raw.types.map(function (_, i) {
    return i < PALETTE.length ? PALETTE[i] : "hsl(" + Math.round((i * 137.508) % 360) + ", 55%, 55%)";
  });

  var shown = new Set(); // ids of the entities drawn
  var hiddenTypes = new Set();
  var highlight = null; // ids matching the search, or null
  var selected = null;
  var found = []; // entities matching the search, best first
  var colors = {};
  var state = window.memoryView = {
    entities: nodes.length, relations: links.length, missing: raw.missing,
    shownEntities: 0, shownRelations: 0, visibleEntities: 0, settled: false, ticks: 0, layoutMs: null,
    selected: null, matches: null,
    // Where an entity is drawn, in page coordinates (for a test to click it), or null if it is not drawn.
    screenPosition: function (name) {
      var node = nodes.find(function (n) { return n.name === name; });
      if (!node || !shown.has(node.id) || node.x === undefined) return null;
      var point = graph.graph2ScreenCoords(node.x, node.y);
      var box = container.getBoundingClientRect();
      return { x: box.left + point.x, y: box.top + point.y };
    }
  };

  var $ = function (id) { return document.getElementById(id); };
  var container = $("graph");
  var graph = new ForceGraph(container)
    .nodeId("id")
    .nodeLabel(function (n) { return escapeHtml(n.name) + " <small>(" + escapeHtml(raw.types[n.type]) + ")</small>"; })
    .nodeVal(function (n) { return 1 + n.degree; })
    .nodeCanvasObject(drawNode)
    .nodePointerAreaPaint(paintNodeArea)
    .nodeVisibility(function (n) { return !hiddenTypes.has(n.type); })
    .linkVisibility(function (l) { return !hiddenTypes.has(l.source.type) && !hiddenTypes.has(l.target.type); })
    .linkColor(function (l) { return touches(l) ? colors.edgeStrong : colors.edge; })
    .linkWidth(function (l) { return touches(l) ? 1.5 : 0.6; })
    .linkDirectionalArrowLength(3)
    .linkDirectionalArrowRelPos(1)
    .linkLabel(function (l) { return escapeHtml(l.source.name + " → " + l.label + " → " + l.target.name); })
    .linkCanvasObjectMode(function () { return "after"; })
    .linkCanvasObject(drawLinkLabel)
    .d3AlphaMin(0.001)
    .cooldownTime(LAYOUT_LIMIT_MS)
    .onEngineTick(function () {
      state.ticks++;
      if (state.ticks === 40) graph.zoomToFit(0, 40);
    })
    .onEngineStop(settled)
    .onNodeClick(function (n) { select(n, false); })
    .onBackgroundClick(function () { select(null); });
  graph.d3Force("charge").strength(-40).distanceMax(400);
  graph.d3Force("link").distance(30);
  graph.d3Force("gravity", gravity(0.06)); // keeps entities without relations from drifting off

  function gravity(strength) {
    // d3's forceX/forceY towards the centre; the UMD build of force-graph does not export them.
    var members = [];
    function force(alpha) {
      for (var i = 0; i < members.length; i++) {
        members[i].vx -= members[i].x * strength * alpha;
        members[i].vy -= members[i].y * strength * alpha;
      }
    }
    force.initialize = function (nodes) { members = nodes; };
    return force;
  }

  var layoutStart = performance.now();
  readColors();
  applyStoredTheme();
  buildLegend();
  showMore();
  new ResizeObserver(function () {
    graph.width(container.clientWidth).height(container.clientHeight);
  }).observe(container);

  $("more").addEventListener("click", showMore);
  $("theme").addEventListener("click", toggleTheme);
  $("all-types").addEventListener("click", function () { setTypes(false); });
  $("no-types").addEventListener("click", function () { setTypes(true); });
  var searchBox = $("search");
  var timer = null;
  searchBox.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { search(searchBox.value); }, 120);
  });
  searchBox.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && found.length) select(found[0], true);
    if (event.key === "Escape") { searchBox.value = ""; search(""); }
  });
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redrawColors);
  }

  // ---- showing entities, most connected first ------------------------------------------------------------

  function showMore() {
    var before = shown.size;
    for (var i = before; i < Math.min(before + PAGE, order.length); i++) place(order[i]);
    setData();
  }

  function reveal(node) {
    if (shown.has(node.id)) return;
    place(node);
    setData();
  }

  function place(node) {
    // A new entity starts next to a neighbour already drawn, so the layout only has to settle it locally.
    var near = node.out.concat(node.into).map(function (l) {
      return nodes[end(l.source)] === node ? nodes[end(l.target)] : nodes[end(l.source)];
    }).find(function (n) { return shown.has(n.id) && n.x !== undefined; });
    if (near) { node.x = near.x + Math.random() * 20 - 10; node.y = near.y + Math.random() * 20 - 10; }
    shown.add(node.id);
  }

  function setData() {
    var visibleLinks = links.filter(function (l) { return shown.has(end(l.source)) && shown.has(end(l.target)); });
    state.shownEntities = shown.size;
    state.shownRelations = visibleLinks.length;
    countVisible();
    state.settled = false;
    layoutStart = performance.now();
    graph.graphData({
      nodes: order.filter(function (n) { return shown.has(n.id); }),
      links: visibleLinks
    });
    updateCounts();
  }

  function settled() {
    if (!state.settled) {
      state.settled = true;
      state.layoutMs = Math.round(performance.now() - layoutStart);
      if (!selected) graph.zoomToFit(400, 40);
    }
    updateCounts();
  }

  function updateCounts() {
    var out = $("counts");
    var text = fmt(nodes.length) + " entities · " + fmt(links.length) + " relations";
    if (shown.size < nodes.length) text += " · showing the " + fmt(shown.size) + " most connected";
    if (raw.missing) text += " · " + fmt(raw.missing) + " relations to missing entities not drawn";
    if (!state.settled && nodes.length) text += " · arranging…";
    out.textContent = text;
    out.dataset.entities = nodes.length;
    out.dataset.relations = links.length;
    out.dataset.shownEntities = state.shownEntities;
    out.dataset.shownRelations = state.shownRelations;
    out.dataset.settled = state.settled;
    var more = $("more");
    var rest = nodes.length - shown.size;
    more.hidden = rest <= 0;
    more.textContent = "Show " + fmt(Math.min(PAGE, rest)) + " more";
    if (!nodes.length) out.textContent = "This memory is empty.";
  }

  // ---- drawing -------------------------------------------------------------------------------------------

  function radius(n) { return 2.5 + Math.sqrt(n.degree) * 1.2; }

  function drawNode(n, ctx, scale) {
    var r = radius(n);
    var dim = highlight !== null && !highlight.has(n.id);
    ctx.beginPath();
    ctx.arc(n.x, n.y, r, 0, 2 * Math.PI);
    ctx.fillStyle = dim ? colors.dim : typeColors[n.type];
    ctx.fill();
    if (n === selected) {
      ctx.lineWidth = 2.5 / scale;
      ctx.strokeStyle = colors.accent;
      ctx.stroke();
    }
    var wanted = n === selected || (highlight !== null && !dim && highlight.size <= 40) || (!dim && r * scale > 6);
    if (wanted) label(ctx, n.name, n.x, n.y + r + 2 / scale, scale, 12);
  }

  function paintNodeArea(n, color, ctx) {
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.arc(n.x, n.y, radius(n) + 1, 0, 2 * Math.PI);
    ctx.fill();
  }

  function drawLinkLabel(l, ctx, scale) {
    if (!(scale > 4 || (selected && touches(l)))) return;
    if (typeof l.source !== "object" || l.source.x === undefined) return;
    label(ctx, l.label, (l.source.x + l.target.x) / 2, (l.source.y + l.target.y) / 2 - 5 / scale, scale, 10);
  }

  function label(ctx, text, x, y, scale, px) {
    if (text.length > 40) text = text.slice(0, 39) + "…";
    ctx.font = px / scale + "px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.lineWidth = 3 / scale;
    ctx.strokeStyle = colors.halo;
    ctx.strokeText(text, x, y);
    ctx.fillStyle = colors.label;
    ctx.fillText(text, x, y);
  }

  function touches(l) {
    return selected !== null && (end(l.source) === selected.id || end(l.target) === selected.id);
  }

  // ---- selecting and searching ---------------------------------------------------------------------------

  function select(node, focus) {
    selected = node;
    state.selected = node ? node.name : null;
    var box = $("details");
    if (!node) {
      box.hidden = true;
      box.textContent = "";
      redraw();
      return;
    }
    reveal(node);
    box.hidden = false;
    box.textContent = "";
    box.appendChild(el("h3", null, node.name));
    box.appendChild(typeTag(node.type));
    var observations = el("ul", "observations");
    node.obs.forEach(function (o) { observations.appendChild(el("li", null, o)); });
    box.appendChild(el("h2", null, node.obs.length + (node.obs.length === 1 ? " observation" : " observations")));
    box.appendChild(observations);
    var relations = el("ul", "relations");
    node.out.forEach(function (l) { relations.appendChild(relationItem("→ " + l.label + " → ", nodes[end(l.target)])); });
    node.into.forEach(function (l) { relations.appendChild(relationItem("← " + l.label + " ← ", nodes[end(l.source)])); });
    var count = node.out.length + node.into.length;
    box.appendChild(el("h2", null, count + (count === 1 ? " relation" : " relations")));
    box.appendChild(relations);
    if (focus && node.x !== undefined) {
      graph.centerAt(node.x, node.y, 600);
      graph.zoom(Math.max(graph.zoom(), 3), 600);
    }
    redraw();
  }

  function relationItem(prefix, other) {
    var item = el("li", null, prefix);
    var button = el("button", "node-link", other.name);
    button.type = "button";
    button.addEventListener("click", function () { select(other, true); });
    item.appendChild(button);
    return item;
  }

  function search(query) {
    var q = query.trim().toLowerCase();
    var box = $("results");
    box.textContent = "";
    if (!q) {
      highlight = null;
      found = [];
      state.matches = null;
      box.hidden = true;
      redraw();
      return;
    }
    var matches = [];
    var where = {};
    nodes.forEach(function (n) {
      var hit = null;
      if (n.name.toLowerCase().indexOf(q) >= 0) hit = "";
      else if (raw.types[n.type].toLowerCase().indexOf(q) >= 0) hit = raw.types[n.type];
      else hit = n.obs.find(function (o) { return o.toLowerCase().indexOf(q) >= 0; });
      if (hit !== undefined && hit !== null) { matches.push(n); where[n.id] = hit; }
    });
    matches.sort(function (a, b) { return (where[a.id] === "" ? 0 : 1) - (where[b.id] === "" ? 0 : 1) || b.degree - a.degree; });
    highlight = new Set(matches.map(function (n) { return n.id; }));
    found = matches;
    state.matches = matches.map(function (n) { return n.name; });
    box.hidden = false;
    box.appendChild(el("h2", null, matches.length + (matches.length === 1 ? " match" : " matches")));
    var list = el("ul");
    matches.slice(0, 50).forEach(function (n) {
      var item = el("li");
      var button = el("button", "node-link", n.name);
      button.type = "button";
      button.addEventListener("click", function () { select(n, true); });
      item.appendChild(button);
      if (where[n.id]) item.appendChild(el("div", "muted", where[n.id]));
      list.appendChild(item);
    });
    if (matches.length > 50) list.appendChild(el("li", "muted", "and " + (matches.length - 50) + " more"));
    box.appendChild(list);
    redraw();
  }

  // ---- types, themes -------------------------------------------------------------------------------------

  function buildLegend() {
    var legend = $("legend");
    raw.types.forEach(function (name, i) {
      var item = el("li");
      var labelEl = el("label");
      var box = el("input");
      box.type = "checkbox";
      box.checked = true;
      box.dataset.type = i;
      box.addEventListener("change", function () {
        if (box.checked) hiddenTypes.delete(i); else hiddenTypes.add(i);
        refilter();
      });
      labelEl.appendChild(box);
      var swatch = el("span", "swatch");
      swatch.style.background = typeColors[i];
      labelEl.appendChild(swatch);
      labelEl.appendChild(el("span", null, name));
      labelEl.appendChild(el("span", "n", fmt(typeCounts[i])));
      item.appendChild(labelEl);
      legend.appendChild(item);
    });
  }

  function setTypes(hide) {
    hiddenTypes = new Set(hide ? raw.types.map(function (_, i) { return i; }) : []);
    document.querySelectorAll("#legend input").forEach(function (box) { box.checked = !hide; });
    refilter();
  }

  function refilter() {
    // Visibility only: the layout stays where it settled.
    graph.nodeVisibility(graph.nodeVisibility()).linkVisibility(graph.linkVisibility());
    countVisible();
  }

  function countVisible() {
    var visible = 0;
    shown.forEach(function (id) { if (!hiddenTypes.has(nodes[id].type)) visible++; });
    state.visibleEntities = visible;
  }

  function typeTag(type) {
    var tag = el("span", "type");
    var swatch = el("span", "swatch");
    swatch.style.background = typeColors[type];
    tag.appendChild(swatch);
    tag.appendChild(document.createTextNode(raw.types[type]));
    return tag;
  }

  function applyStoredTheme() {
    var stored = null;
    try { stored = localStorage.getItem("memory-view-theme"); } catch (e) { stored = null; }
    if (stored === "light" || stored === "dark") setTheme(stored);
  }

  function toggleTheme() {
    var dark = getComputedStyle(document.documentElement).getPropertyValue("--bg").trim() === "#0d1117";
    var next = dark ? "light" : "dark";
    setTheme(next);
    try { localStorage.setItem("memory-view-theme", next); } catch (e) { /* a file:// page may have no storage */ }
  }

  function setTheme(name) {
    document.documentElement.dataset.theme = name;
    state.theme = name;
    redrawColors();
  }

  function readColors() {
    var style = getComputedStyle(document.documentElement);
    ["edge", "edgeStrong", "label", "halo", "accent", "dim"].forEach(function (key) {
      colors[key] = style.getPropertyValue("--" + key.replace(/[A-Z]/g, function (c) { return "-" + c.toLowerCase(); })).trim();
    });
  }

  function redrawColors() {
    readColors();
    redraw();
  }

  function redraw() {
    // Setting an accessor again makes force-graph draw one more frame after its layout has stopped.
    graph.nodeCanvasObject(drawNode).linkColor(graph.linkColor());
  }

  // ---- helpers -------------------------------------------------------------------------------------------

  function end(x) { return typeof x === "object" ? x.id : x; }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(n) { return n.toLocaleString("en-US"); }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
})();
