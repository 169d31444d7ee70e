import Foundation
import Synchronization

/// Counters and gauges in Prometheus' text format (`/metrics`).
final class Metrics: Sendable {
    private let counters = Mutex<[String: Double]>([:])

    /// Adds `by` to the counter `name` with `labels`.
    func count(_ name: String, _ labels: [String: String] = [:], by value: Double = 1) {
        count(key: Self.key(name, labels), by: value)
    }

    /// Adds `by` to the counter whose ``key(_:_:)`` is made once beforehand (for counters a request path
    /// counts: rendering the key cost more than the count).
    func count(key: String, by value: Double = 1) {
        counters.withLock { $0[key, default: 0] += value }
    }

    static func key(_ name: String, _ labels: [String: String]) -> String {
        guard !labels.isEmpty else { return name }
        // One or two labels (every count an input makes) without a sorted copy and an array of parts.
        func part(_ label: (key: String, value: String)) -> String { label.key + "=\"" + escape(label.value) + "\"" }
        if labels.count == 1, let only = labels.first { return name + "{" + part(only) + "}" }
        if labels.count == 2 {
            let first = labels[labels.startIndex]
            let second = labels[labels.index(after: labels.startIndex)]
            let (low, high) = first.key < second.key ? (first, second) : (second, first)
            return name + "{" + part(low) + "," + part(high) + "}"
        }
        let rendered = labels.sorted { $0.key < $1.key }.map { key, value in "\(key)=\"\(escape(value))\"" }
        return "\(name){\(rendered.joined(separator: ","))}"
    }

    /// A label value with backslash, quote and newline escaped (nearly always none: then as it is).
    static func escape(_ value: String) -> String {
        guard value.utf8.contains(where: { $0 == 0x5C || $0 == 0x22 || $0 == 0x0A }) else { return value }
        var result = ""
        for character in value {
            switch character {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\n": result += "\\n"
            default: result.append(character)
            }
        }
        return result
    }

    /// The exposition text: counters, then the counters kept elsewhere (`totals`) and the gauges given.
    func render(
        totals: [(name: String, help: String, value: Double)] = [],
        gauges: [(name: String, help: String, value: Double)]
    ) -> String {
        let snapshot = counters.withLock { $0 }
        var text = ""
        var typed: Set<String> = []
        for (key, value) in snapshot.sorted(by: { $0.key < $1.key }) {
            let name = String(key.prefix { $0 != "{" })
            if typed.insert(name).inserted { text += "# TYPE \(name) counter\n" }
            text += "\(key) \(Self.number(value))\n"
        }
        for (type, metrics) in [("counter", totals), ("gauge", gauges)] {
            for metric in metrics {
                text +=
                    "# HELP \(metric.name) \(metric.help)\n# TYPE \(metric.name) \(type)\n\(metric.name) \(Self.number(metric.value))\n"
            }
        }
        return text
    }

    static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
