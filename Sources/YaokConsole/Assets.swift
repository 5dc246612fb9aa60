/// Everything the console's pages load, embedded in the binary: no CDN, no web font (the
/// system's own sans-serif), works with no network at all.
enum Assets {
    /// The icon: a speech bubble with a tick, in the header and as the favicon.
    static let icon = #"""
    <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#0b3d91"/><path d="M7 9h18a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H14l-5 4v-4H7a2 2 0 0 1-2-2V11a2 2 0 0 1 2-2z" fill="#fff"/><path d="M11 16l3.5 3.5L21 13" fill="none" stroke="#0b3d91" stroke-width="2.6" stroke-linecap="round" stroke-linejoin="round"/></svg>
    """#

    /// Colours meet WCAG 2.1 AA (4.5:1) for text on their backgrounds; state is also in words and glyphs.
    static let css = #"""
    :root { --ink: #111; --muted: #3d4550; --bg: #f7f8fa; --card: #fff; --line: #c5cbd3; --accent: #0b3d91;
      --ok-bg: #e3f4e6; --ok: #0d4a1c; --warn-bg: #fff1cc; --warn: #5a3a00; --bad-bg: #fde4e4; --bad: #8a0f0f;
      --off-bg: #eceff2; --off: #2b333d; --focus: #c75400; }
    * { box-sizing: border-box; }
    html { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; font-size: 100%; }
    body { margin: 0; background: var(--bg); color: var(--ink); line-height: 1.45; }
    a { color: var(--accent); }
    :focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
    .skip { position: absolute; left: -999px; top: 0; background: #fff; padding: .5rem; }
    .skip:focus { left: .5rem; }
    header { background: var(--accent); color: #fff; padding: .5rem .75rem; display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; }
    header .brand { display: flex; align-items: center; gap: .5rem; font-weight: 700; }
    header .hubname { font-weight: 400; opacity: .95; }
    header nav ul { list-style: none; display: flex; flex-wrap: wrap; gap: .25rem; margin: 0; padding: 0; }
    header nav a { color: #fff; text-decoration: none; padding: .4rem .6rem; border-radius: 6px; display: inline-block; min-height: 44px; line-height: 28px; }
    header nav a[aria-current="page"] { background: #fff; color: var(--accent); font-weight: 700; }
    header nav a:hover { text-decoration: underline; }
    header :focus-visible { outline-color: #ffb347; }
    .logout { margin-left: auto; }
    button { font: inherit; padding: .5rem .9rem; border-radius: 6px; border: 2px solid var(--accent); background: var(--accent); color: #fff; min-height: 44px; cursor: pointer; }
    header button { background: #fff; color: var(--accent); border-color: #fff; }
    button.off { background: #fff; color: var(--bad); border-color: var(--bad); }
    button.on { background: #fff; color: var(--ok); border-color: var(--ok); }
    main { padding: .75rem; max-width: 1200px; margin: 0 auto; }
    h1 { font-size: 1.5rem; margin: .25rem 0 .75rem; }
    h2.section { font-size: 1.2rem; margin: 1.25rem 0 .5rem; }
    h3.sub { font-size: 1rem; margin: 1rem 0 .25rem; }
    .summary { font-size: 1.05rem; margin: .25rem 0 0; }
    .glance { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: .5rem .75rem; }
    .glance h2.section { margin: 0 0 .25rem; }
    .glance dl { display: grid; grid-template-columns: repeat(auto-fill, minmax(9rem, 1fr)); gap: .2rem .75rem; margin: 0; }
    .glance dl div { min-width: 0; } .glance dt { color: var(--muted); font-size: .85rem; }
    .glance dd { margin: 0; font-weight: 700; overflow-wrap: anywhere; }
    @media (max-width: 640px) { .glance dl { grid-template-columns: 1fr 1fr; } .glance .wide { grid-column: 1 / -1; } h1 { margin-bottom: .4rem; } }
    #live { color: var(--muted); font-size: .9rem; }
    .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(280px, 1fr)); gap: .75rem; }
    .card { background: var(--card); border: 1px solid var(--line); border-left-width: 8px; border-radius: 8px; padding: .75rem; }
    .card h3 { margin: 0 0 .25rem; font-size: 1.15rem; }
    .card .kind { color: var(--muted); font-weight: 400; }
    .card .state { margin: .25rem 0; font-size: 1.05rem; }
    .card .glyph { display: inline-block; width: 1.6rem; height: 1.6rem; line-height: 1.6rem; text-align: center; border-radius: 50%; font-weight: 700; }
    .card[data-css="ok"] { border-left-color: #1e7a34; } .card[data-css="ok"] .glyph { background: var(--ok-bg); color: var(--ok); }
    .card[data-css="warn"] { border-left-color: #b07800; } .card[data-css="warn"] .glyph { background: var(--warn-bg); color: var(--warn); }
    .card[data-css="bad"] { border-left-color: #c21c1c; } .card[data-css="bad"] .glyph { background: var(--bad-bg); color: var(--bad); }
    .card[data-css="off"], .card[data-css="wait"] { border-left-color: #6b7480; } .card[data-css="off"] .glyph, .card[data-css="wait"] .glyph { background: var(--off-bg); color: var(--off); }
    .card .reason { margin: .25rem 0 .5rem; overflow-wrap: anywhere; }
    .facts { display: grid; grid-template-columns: 1fr 1fr; gap: .25rem .75rem; margin: 0 0 .5rem; }
    .facts div { min-width: 0; } .facts .wide { grid-column: 1 / -1; }
    .facts dt { color: var(--muted); font-size: .85rem; } .facts dd { margin: 0; font-weight: 600; overflow-wrap: anywhere; }
    .two { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 1rem; }
    table { border-collapse: collapse; width: 100%; background: var(--card); }
    th, td { text-align: left; padding: .4rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
    tbody th { font-weight: 400; } td { font-weight: 600; font-variant-numeric: tabular-nums; white-space: nowrap; }
    table.grid td { white-space: normal; }
    table.grid td { font-weight: 400; } caption { text-align: left; font-weight: 600; padding: .25rem 0; }
    .scroll { overflow-x: auto; }
    .path code { overflow-wrap: anywhere; }
    .pill { display: inline-block; padding: .1rem .5rem; border-radius: 999px; font-weight: 700; white-space: nowrap; }
    .pill.ok { background: var(--ok-bg); color: var(--ok); } .pill.bad { background: var(--bad-bg); color: var(--bad); }
    .banner { border-radius: 8px; padding: .6rem .75rem; margin: .5rem 0; border: 2px solid; overflow-wrap: anywhere; }
    .banner.ok { background: var(--ok-bg); color: var(--ok); } .banner.bad { background: var(--bad-bg); color: var(--bad); }
    .banner.warn { background: var(--warn-bg); color: var(--warn); }
    .login { display: flex; flex-direction: column; gap: .5rem; max-width: 22rem; }
    .login input { font: inherit; padding: .5rem; border: 2px solid var(--muted); border-radius: 6px; min-height: 44px; }
    .hint { color: var(--muted); }
    code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .95em; }
    .qr { margin: 1rem 0; max-width: 22rem; } .qr svg { width: 100%; height: auto; border: 1px solid var(--line); }
    .charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 520px), 1fr)); gap: 0 1rem; }
    .chart { margin: 1rem 0; background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: .5rem; min-width: 0; }
    .chart svg { width: 100%; height: auto; display: block; } .chart .grid { stroke: #d5d9de; stroke-width: 1; }
    .chart .axis { font-size: 12px; fill: #3d4550; } .chart .label { font-size: 13px; font-weight: 700; }
    @media (max-width: 520px) { .chart .axis { font-size: 15px; } .chart .label { font-size: 15px; } .chart .axis.mid { display: none; } }
    @media (max-width: 640px) {
      table.grid thead { position: absolute; left: -9999px; }
      table.grid caption { display: block; text-align: left; }
      table.grid, table.grid tbody, table.grid tr, table.grid td { display: block; width: 100%; }
      table.grid tr { border: 1px solid var(--line); border-radius: 8px; margin: 0 0 .5rem; padding: .25rem .5rem; }
      table.grid td { border: 0; padding: .15rem 0; display: grid; grid-template-columns: 7.5rem 1fr; gap: .5rem; }
      table.grid td::before { content: attr(data-label); color: var(--muted); font-size: .85rem; }
    }
    @media (max-width: 480px) { main { padding: .5rem; } .facts { grid-template-columns: 1fr 1fr; } header nav a { padding: .4rem .45rem; } }
    """#

    /// Live updates over Server-Sent Events. The overview: the server sends every field's value
    /// and text; this sets them with textContent (never as HTML). The charts: the server sends
    /// each chart's new SVG, parsed as SVG (XML, not HTML: no script runs from it, and the CSP
    /// allows none inline) and swapped in whole, and the captions as text.
    static let js = #"""
    "use strict";
    (function () {
      var view = document.body.dataset.live;
      if (!window.EventSource || (view !== "overview" && view !== "charts")) return;
      var live = document.getElementById("live");
      function updated() { if (live) live.textContent = "Live: updated " + new Date().toLocaleTimeString(); }
      if (view === "charts") {
        var charts = new EventSource("/events?view=charts");
        charts.addEventListener("charts", function (ev) {
          var u;
          try { u = JSON.parse(ev.data); } catch (e) { return; }
          (u.charts || []).forEach(function (c) {
            var fig = document.getElementById("fig-" + c.id), old = document.getElementById(c.id);
            if (!fig || !old) return;
            var doc = new DOMParser().parseFromString(c.svg, "image/svg+xml");
            var svg = doc.documentElement;
            if (!svg || svg.nodeName !== "svg" || svg.id !== c.id) return;
            old.replaceWith(document.importNode(svg, true));
            var words = fig.querySelector(".latest");
            if (words) words.textContent = c.latest;
          });
          var idle = document.getElementById("charts-idle");
          if (idle) idle.textContent = u.idle || "";
          updated();
        });
        charts.addEventListener("error", function () { if (live) live.textContent = "Live updates paused: reconnecting…"; });
        return;
      }
      var names = Array.prototype.map.call(document.querySelectorAll("[data-transport]"), function (c) { return c.dataset.transport; });
      var es = new EventSource("/events");
      es.addEventListener("overview", function (ev) {
        var u;
        try { u = JSON.parse(ev.data); } catch (e) { return; }
        if (!u.transports || u.transports.join("\n") !== names.join("\n")) { window.location.reload(); return; }
        Object.keys(u.fields).forEach(function (key) {
          var els = document.querySelectorAll('[data-field="' + CSS.escape(key) + '"]');
          for (var i = 0; i < els.length; i++) {
            var el = els[i], v = u.fields[key];
            if (el.dataset.value !== v[0]) { el.dataset.value = v[0]; el.textContent = v[1]; }
            if (key.slice(-6) === ".glyph") {
              var card = el.closest("[data-transport]");
              if (card) card.dataset.css = v[0];
            }
          }
        });
        updated();
      });
      es.addEventListener("error", function () { if (live) live.textContent = "Live updates paused: reconnecting…"; });
    })();
    """#
}
