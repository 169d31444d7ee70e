import Foundation

/// A line chart as server-rendered SVG, with the same numbers in a table beside it (for screen readers,
/// for reading without the picture, and so a test can read exactly what is drawn).
public struct LineChart: Sendable {
    public var id: String
    public var title: String
    /// One label per point (the period's start, say).
    public var labels: [String]
    public var values: [Double]
    /// How a value is written (`"12"`, `"4.99"`, `"12.5 %"`).
    public var format: @Sendable (Double) -> String

    public init(
        id: String, title: String, labels: [String], values: [Double], format: @escaping @Sendable (Double) -> String
    ) {
        self.id = id
        self.title = title
        self.labels = labels
        self.values = values
        self.format = format
    }

    /// Whole numbers without decimals, others with two.
    public static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.2f", value)
    }

    public var html: HTML {
        let width = 600.0
        let height = 220.0
        let (left, right, top, bottom) = (48.0, 12.0, 12.0, 28.0)
        let low = min(0, values.min() ?? 0)
        var high = max(values.max() ?? 0, low + 1)
        if high == low { high = low + 1 }
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        func x(_ index: Int) -> Double {
            values.count <= 1 ? left + plotWidth / 2 : left + plotWidth * Double(index) / Double(values.count - 1)
        }
        func y(_ value: Double) -> Double { top + plotHeight * (1 - (value - low) / (high - low)) }
        func coordinate(_ value: Double) -> String { String(format: "%.1f", value) }
        let points = values.indices.map { "\(coordinate(x($0))),\(coordinate(y(values[$0])))" }.joined(separator: " ")
        var marks = HTML(raw: "")
        for index in values.indices {
            marks += """
                <circle class="dot" cx="\(coordinate(x(index)))" cy="\(coordinate(y(values[index])))" r="2.5">\
                <title>\(labels[index]): \(format(values[index]))</title></circle>
                """
        }
        let first = labels.first ?? ""
        let last = labels.last ?? ""
        let svg: HTML = """
            <svg class="chart" viewBox="0 0 \(Int(width)) \(Int(height))" role="img" aria-labelledby="\(id)-title" \
            id="\(id)-svg" xmlns="http://www.w3.org/2000/svg">\
            <title id="\(id)-title">\(title), \(first) to \(last)</title>\
            <line class="axis" x1="\(Int(left))" y1="\(coordinate(y(low)))" x2="\(Int(width - right))" \
            y2="\(coordinate(y(low)))"/>\
            <line class="axis" x1="\(Int(left))" y1="\(Int(top))" x2="\(Int(left))" y2="\(Int(height - bottom))"/>\
            <text x="\(Int(left - 4))" y="\(Int(top + 10))" text-anchor="end">\(format(high))</text>\
            <text x="\(Int(left - 4))" y="\(coordinate(y(low)))" text-anchor="end">\(format(low))</text>\
            <text x="\(Int(left))" y="\(Int(height - 8))">\(first)</text>\
            <text x="\(Int(width - right))" y="\(Int(height - 8))" text-anchor="end">\(last)</text>\
            <polyline class="line" points="\(points)"/>\(marks)</svg>
            """
        let rows = values.indices.map { index -> [HTML] in
            ["\(labels[index])", "<span class=\"value\">\(format(values[index]))</span>"]
        }
        let table = HTML.table(
            id: id + "-table", caption: title + " (numbers)", columns: ["Period", title], rows: rows)
        return """
            <figure id="\(id)"><figcaption>\(title)</figcaption>\(svg)
            <details><summary>Numbers</summary>\(table)</details></figure>
            """
    }
}
