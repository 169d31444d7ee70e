/// The dashboards' one stylesheet and one script, shipped in the binary (no build chain, no files to find
/// at run time). Served at `<assets>/dashboard.css` and `<assets>/dashboard.js`.
public enum DashboardAssets {
    /// The response for `name` (`dashboard.css` or `dashboard.js`), nil for anything else.
    public static func file(_ name: String) -> (type: String, body: [UInt8])? {
        switch name {
        case "dashboard.css": ("text/css; charset=utf-8", Array(stylesheet.utf8))
        case "dashboard.js": ("text/javascript; charset=utf-8", Array(script.utf8))
        default: nil
        }
    }

    public static let stylesheet = """
        :root { --ink: #1b1f24; --muted: #505a66; --line: #c9d1da; --back: #ffffff; --soft: #f3f5f8;
          --accent: #0b57b7; --bad: #a4161a; --bad-back: #fde8e8; --good: #1a6b2f; }
        * { box-sizing: border-box; }
        body { margin: 0; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
          background: var(--back); }
        .skip { position: absolute; left: -999px; } .skip:focus { left: 8px; top: 8px; background: #fff; }
        header { background: var(--ink); color: #fff; padding: 8px 16px; display: flex; flex-wrap: wrap;
          gap: 8px 24px; align-items: center; }
        header .product { margin: 0; font-weight: 700; }
        header ul { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
        header a { color: #fff; } header a[aria-current="page"] { font-weight: 700; text-decoration-thickness: 3px; }
        main { padding: 12px 16px 48px; max-width: 1200px; margin: 0 auto; }
        h1 { font-size: 1.5rem; margin: 8px 0 12px; } h2 { font-size: 1.2rem; margin: 28px 0 8px; }
        a { color: var(--accent); }
        .scroll { overflow-x: auto; }
        table { border-collapse: collapse; width: 100%; margin: 4px 0 12px; font-size: 0.92rem; }
        caption { text-align: left; font-weight: 600; padding: 4px 0; }
        th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
        th { background: var(--soft); }
        tr.failed td, tr.bad td { background: var(--bad-back); color: var(--bad); }
        .empty { color: var(--muted); }
        dl.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(220px, 1fr)); gap: 6px 16px;
          margin: 8px 0; }
        dl.facts div { border-left: 3px solid var(--line); padding-left: 8px; }
        dt { color: var(--muted); font-size: 0.85rem; } dd { margin: 0; overflow-wrap: anywhere; }
        form { margin: 4px 0; }
        form.action { display: inline-flex; flex-wrap: wrap; gap: 6px; align-items: end; margin: 4px 8px 4px 0;
          padding: 6px; border: 1px solid var(--line); border-radius: 6px; background: var(--soft); }
        form.action.danger button { background: var(--bad); }
        label { display: inline-flex; flex-direction: column; font-size: 0.85rem; color: var(--muted); }
        input, select { font: inherit; padding: 4px 6px; border: 1px solid #8a96a3; border-radius: 4px;
          color: var(--ink); background: #fff; }
        button { font: inherit; padding: 5px 12px; border: 0; border-radius: 4px; background: var(--accent);
          color: #fff; cursor: pointer; }
        button:focus-visible, a:focus-visible, input:focus-visible, select:focus-visible { outline: 3px solid #f0a500;
          outline-offset: 2px; }
        #status:not(:empty) { padding: 8px 12px; margin: 8px 0; border-radius: 6px; background: var(--soft); }
        #status.error { background: var(--bad-back); color: var(--bad); }
        .badge { display: inline-block; padding: 0 6px; border-radius: 10px; background: var(--soft);
          border: 1px solid var(--line); font-size: 0.82rem; }
        .badge.bad { background: var(--bad-back); color: var(--bad); border-color: var(--bad); }
        .badge.good { color: var(--good); border-color: var(--good); }
        .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 16px; }
        figure { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: 8px; }
        figcaption { font-weight: 600; }
        svg.chart { width: 100%; height: auto; }
        svg.chart .axis { stroke: #8a96a3; stroke-width: 1; }
        svg.chart .line { fill: none; stroke: var(--accent); stroke-width: 2; }
        svg.chart .dot { fill: var(--accent); }
        svg.chart text { font-size: 11px; fill: var(--muted); }
        details summary { cursor: pointer; color: var(--accent); }
        code { overflow-wrap: anywhere; }
        @media (max-width: 600px) { body { font-size: 15px; } main { padding: 8px; } th, td { padding: 4px; } }
        """

    /// Sends an action form's fields as JSON to its API route (same origin, so the control plane's
    /// protections hold), then reloads or follows `data-next`.
    public static let script = """
        "use strict";
        (function () {
          function status(text, bad) {
            var box = document.getElementById("status");
            if (!box) { return; }
            box.textContent = text;
            box.className = bad ? "error" : "";
          }
          function typed(input) {
            var type = input.getAttribute("data-type") || "string";
            var value = input.value;
            if (type === "bool") { return value === "true"; }
            if (type === "int") { return parseInt(value, 10); }
            if (type === "json") { return JSON.parse(value); }
            return value;
          }
          function fill(template, values) {
            return template.replace(/\\{([A-Za-z0-9_.]+)\\}/g, function (_, name) {
              var value = values;
              name.split(".").forEach(function (part) { value = value == null ? value : value[part]; });
              return encodeURIComponent(value == null ? "" : String(value));
            });
          }
          async function send(method, url, body) {
            var response = await fetch(url, {
              method: method, credentials: "same-origin",
              headers: { "Content-Type": "application/json", "Accept": "application/json" },
              body: method === "DELETE" ? undefined : JSON.stringify(body)
            });
            var text = await response.text();
            var answer = null;
            try { answer = text ? JSON.parse(text) : null; } catch (e) { answer = null; }
            if (!response.ok) {
              var message = answer && answer.error ? (answer.error.message || answer.error.code) : text;
              throw new Error(response.status + ": " + (message || response.statusText));
            }
            return answer;
          }
          document.addEventListener("submit", async function (event) {
            var form = event.target;
            if (!form.matches("form.action")) { return; }
            event.preventDefault();
            var template = form.getAttribute("data-api");
            var values = {};
            var body = {};
            Array.prototype.forEach.call(form.querySelectorAll("input[name], select[name]"), function (input) {
              if (input.value === "") { return; }
              values[input.name] = input.value;
              if (template.indexOf("{" + input.name + "}") < 0) { body[input.name] = typed(input); }
            });
            var button = form.querySelector("button");
            button.disabled = true;
            status("Working…", false);
            try {
              var before = (form.getAttribute("data-before") || "").split(" ").filter(Boolean);
              for (var i = 0; i < before.length; i++) { await send("POST", fill(before[i], values), {}); }
              var answer = await send(form.getAttribute("data-method") || "POST", fill(template, values), body);
              var next = form.getAttribute("data-next");
              status("Done.", false);
              if (next) { window.location.assign(fill(next, answer || {})); } else { window.location.reload(); }
            } catch (error) {
              status(String(error.message || error), true);
              button.disabled = false;
            }
          });
        })();
        """
}
