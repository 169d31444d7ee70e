public import Foundation

/// Server-rendered HTML, small and escaped: text goes through ``HTML/escape(_:)`` (or the `HTML` value's
/// interpolation), markup is built by the dashboards from these pieces. No template language.
public struct HTML: Sendable, Hashable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
    CustomStringConvertible
{
    public private(set) var text: String

    public init(raw text: String) { self.text = text }
    public init(stringLiteral value: String) { text = value }
    public init(stringInterpolation: Interpolation) { text = stringInterpolation.text }

    public var description: String { text }

    /// Interpolated strings and numbers are escaped; interpolated `HTML` is kept as markup.
    public struct Interpolation: StringInterpolationProtocol {
        var text = ""
        public init(literalCapacity: Int, interpolationCount: Int) { text.reserveCapacity(literalCapacity * 2) }
        public mutating func appendLiteral(_ literal: String) { text += literal }
        public mutating func appendInterpolation(_ value: HTML) { text += value.text }
        public mutating func appendInterpolation(_ value: [HTML]) { for item in value { text += item.text } }
        public mutating func appendInterpolation(_ value: String) { text += HTML.escape(value) }
        public mutating func appendInterpolation(_ value: String?) { text += HTML.escape(value ?? "") }
        public mutating func appendInterpolation<N: BinaryInteger>(_ value: N) { text += String(value) }
    }

    public static func + (left: HTML, right: HTML) -> HTML { HTML(raw: left.text + right.text) }
    public static func += (left: inout HTML, right: HTML) { left.text += right.text }

    /// Escapes `& < > " '` for text and attribute values.
    public static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// Joins pieces.
    public static func join(_ pieces: [HTML], separator: HTML = "") -> HTML {
        HTML(raw: pieces.map(\.text).joined(separator: separator.text))
    }

    /// A table with a caption, column headings and rows of cells; `empty` is shown when there are no rows.
    public static func table(
        id: String, caption: String, columns: [String], rows: [[HTML]], empty: String = "Nothing yet.",
        rowClasses: [String?] = []
    ) -> HTML {
        guard !rows.isEmpty else { return "<p class=\"empty\" id=\"\(id)\">\(caption): \(empty)</p>" }
        var body = HTML(raw: "")
        for (index, row) in rows.enumerated() {
            let rowClass = index < rowClasses.count ? rowClasses[index] : nil
            body += "<tr\(rowClass.map { HTML(raw: " class=\"\(HTML.escape($0))\"") } ?? "")>"
            for cell in row { body += "<td>\(cell)</td>" }
            body += "</tr>"
        }
        let headings = HTML.join(columns.map { "<th scope=\"col\">\($0)</th>" })
        return """
            <div class="scroll"><table id="\(id)"><caption>\(caption)</caption>\
            <thead><tr>\(headings)</tr></thead><tbody>\(body)</tbody></table></div>
            """
    }

    /// `key: value` pairs as a description list.
    public static func facts(_ pairs: [(String, HTML)], id: String? = nil) -> HTML {
        let items = HTML.join(pairs.map { "<div><dt>\($0.0)</dt><dd>\($0.1)</dd></div>" })
        return "<dl class=\"facts\"\(id.map { HTML(raw: " id=\"\(HTML.escape($0))\"") } ?? "")>\(items)</dl>"
    }

    /// A date as people read it, in UTC, to the second; "—" for none.
    public static func date(_ date: Date?) -> HTML {
        guard let date else { return "—" }
        let text = date.ISO8601Format()
        let shown = text.replacingOccurrences(of: "T", with: " ").replacingOccurrences(of: "Z", with: " UTC")
        return "<time datetime=\"\(text)\">\(shown)</time>"
    }

    /// A link (`href` is escaped).
    public static func link(_ text: String, to href: String) -> HTML { "<a href=\"\(href)\">\(text)</a>" }

    /// Percent-encodes a path segment or query value.
    public static func component(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~")))
            ?? ""
    }
}
