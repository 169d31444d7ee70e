/// The frame of every dashboard page: a skip link, a header with the product's name and navigation, the
/// page's heading and content, and one status region the script writes results into. Pages read without
/// JavaScript; buttons need it (they send the API's JSON requests).
public struct Page: Sendable {
    public var title: String
    /// The product part of the header ("App Store emulator", "Purchase server").
    public var product: String
    /// (label, href) pairs; the current page's is marked.
    public var navigation: [(String, String)]
    public var current: String
    /// Where the stylesheet and script are served (`<assets>/dashboard.css`, `<assets>/dashboard.js`).
    public var assets: String
    public var body: HTML

    public init(
        title: String, product: String, navigation: [(String, String)], current: String, assets: String, body: HTML
    ) {
        self.title = title
        self.product = product
        self.navigation = navigation
        self.current = current
        self.assets = assets
        self.body = body
    }

    public var html: HTML {
        let links = HTML.join(
            navigation.map { label, href in
                href == current
                    ? "<li><a href=\"\(href)\" aria-current=\"page\">\(label)</a></li>"
                    : "<li><a href=\"\(href)\">\(label)</a></li>"
            })
        return """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(title) · \(product)</title>
            <link rel="stylesheet" href="\(assets)/dashboard.css">
            <script src="\(assets)/dashboard.js" defer></script>
            </head><body>
            <a class="skip" href="#main">Skip to content</a>
            <header><p class="product">Storekeeper · \(product)</p><nav aria-label="Main"><ul>\(links)</ul></nav></header>
            <main id="main"><h1>\(title)</h1>
            <div id="status" role="status" aria-live="polite"></div>
            \(body)
            </main></body></html>
            """
    }

    /// The page as a response body.
    public var bytes: [UInt8] { Array(html.text.utf8) }

    /// Response headers of a page: HTML, not cached, not framed, scripts only from here.
    public static let headers: [(name: String, value: String)] = [
        ("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
        ("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin"),
        (
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
        ),
    ]
}

/// A button that sends one JSON request to the API (the page's script does it; `fields` become the
/// body). `action` may hold `{name}` placeholders filled from fields of that name (which then stay out of
/// the body). After success the page reloads, or goes to `next` with `{key.path}` filled from the answer.
public struct ActionForm: Sendable {
    public enum Field: Sendable {
        /// A fixed member: `type` is `string`, `bool`, `int` or `json`.
        case hidden(name: String, value: String, type: String = "string")
        case select(name: String, label: String, options: [(value: String, label: String)], type: String = "string")
        case text(
            name: String, label: String, placeholder: String = "", type: String = "string", required: Bool = false)
    }

    public var label: String
    public var method: String
    public var action: String
    public var fields: [Field]
    public var next: String?
    /// Requests sent first, in order (an app's install before a payment), with the same placeholders.
    public var before: [String]
    public var id: String?
    public var style: String

    public init(
        _ label: String, method: String = "POST", action: String, fields: [Field] = [], next: String? = nil,
        before: [String] = [], id: String? = nil, style: String = ""
    ) {
        self.label = label
        self.method = method
        self.action = action
        self.fields = fields
        self.next = next
        self.before = before
        self.id = id
        self.style = style
    }

    public var html: HTML {
        var inputs = HTML(raw: "")
        for field in fields {
            switch field {
            case .hidden(let name, let value, let type):
                inputs += "<input type=\"hidden\" name=\"\(name)\" value=\"\(value)\" data-type=\"\(type)\">"
            case .select(let name, let label, let options, let type):
                let choices = HTML.join(options.map { "<option value=\"\($0.value)\">\($0.label)</option>" })
                inputs += """
                    <label>\(label) <select name="\(name)" data-type="\(type)">\(choices)</select></label>
                    """
            case .text(let name, let label, let placeholder, let type, let required):
                inputs += """
                    <label>\(label) <input name="\(name)" placeholder="\(placeholder)" data-type="\(type)"\
                    \(required ? " required" : "")></label>
                    """
            }
        }
        let identity = id.map { HTML(raw: " id=\"\(HTML.escape($0))\"") } ?? ""
        let after = next.map { HTML(raw: " data-next=\"\(HTML.escape($0))\"") } ?? ""
        let first = before.isEmpty ? "" : HTML(raw: " data-before=\"\(HTML.escape(before.joined(separator: " ")))\"")
        return """
            <form class="action \(style)" data-api="\(action)" data-method="\(method)"\(after)\(first)\(identity)>\
            \(inputs)<button type="submit">\(label)</button></form>
            """
    }
}
