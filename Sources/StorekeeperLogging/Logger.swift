public import Foundation
import Synchronization

/// A small structured logger in the manner of swift-log: a value with a label, a level and metadata,
/// writing through a ``LogHandler``. Messages are constant strings; what varies goes into metadata with
/// dot-namespaced keys (`request.id`, `response.status`).
///
/// Secrets never reach a handler: metadata whose key names a secret (``Logger/isSecretKey(_:)``: password,
/// secret, token, key, authorization, receipt, jws, signed…) is replaced by `<redacted>` before it is written.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error, critical

        public init?(name: String) {
            guard let level = Self.allCases.first(where: { $0.description == name.lowercased() }) else { return nil }
            self = level
        }

        public var description: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            case .critical: "critical"
            }
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public typealias Metadata = [String: String]

    public var label: String
    public var level: Level
    public var metadata: Metadata
    public let handler: any LogHandler

    public init(label: String, level: Level = .info, metadata: Metadata = [:], handler: any LogHandler) {
        self.label = label
        self.level = level
        self.metadata = metadata
        self.handler = handler
    }

    /// A logger that writes nothing.
    public static let disabled = Logger(label: "disabled", level: .critical, handler: NullLogHandler())

    public subscript(metadataKey key: String) -> String? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// A copy with more metadata.
    public func with(_ extra: Metadata) -> Logger {
        var copy = self
        copy.metadata.merge(extra) { $1 }
        return copy
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String, _ extra: Metadata = [:]) {
        guard level >= self.level else { return }
        var merged = metadata
        merged.merge(extra) { $1 }
        for key in merged.keys where Self.isSecretKey(key) { merged[key] = "<redacted>" }
        handler.write(LogRecord(date: Date(), level: level, label: label, message: message(), metadata: merged))
    }

    public func trace(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.trace, message(), extra) }
    public func debug(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.debug, message(), extra) }
    public func info(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.info, message(), extra) }
    public func notice(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.notice, message(), extra) }
    public func warning(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) {
        log(.warning, message(), extra)
    }
    public func error(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.error, message(), extra) }
    public func critical(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) {
        log(.critical, message(), extra)
    }

    /// Whether a metadata key names something that must never be written: any dot-separated part of it
    /// is, or ends with, one of the secret words.
    public static func isSecretKey(_ key: String) -> Bool {
        let words = ["password", "secret", "token", "key", "authorization", "receipt", "jws", "signed", "cookie"]
        return key.lowercased().split(separator: ".").contains { part in
            words.contains { part == $0 || part.hasSuffix($0) || part.hasPrefix($0) }
        }
    }
}

/// One log event as a handler receives it (metadata already redacted).
public struct LogRecord: Sendable {
    public var date: Date
    public var level: Logger.Level
    public var label: String
    public var message: String
    public var metadata: Logger.Metadata

    public init(date: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) {
        self.date = date
        self.level = level
        self.label = label
        self.message = message
        self.metadata = metadata
    }
}

/// Where log records go.
public protocol LogHandler: Sendable {
    func write(_ record: LogRecord)
}

/// Discards everything.
public struct NullLogHandler: LogHandler {
    public init() {}
    public func write(_ record: LogRecord) {}
}

/// Writes one line per record to a file handle (standard error by default), as text
/// (`2026-12-01T10:00:00.123Z info emulator: request answered request.id=… response.status=200`) or as JSON.
public final class StreamLogHandler: LogHandler {
    public enum Format: String, Sendable, CaseIterable { case text, json }

    private let format: Format
    private let output: Mutex<FileHandle>

    public init(format: Format = .text, output: FileHandle = .standardError) {
        self.format = format
        self.output = Mutex(output)
    }

    public func write(_ record: LogRecord) {
        let line = Self.render(record, format: format) + "\n"
        output.withLock { $0.write(Data(line.utf8)) }
    }

    /// One line without its newline.
    public static func render(_ record: LogRecord, format: Format) -> String {
        let time = timestamp(record.date)
        let keys = record.metadata.keys.sorted()
        switch format {
        case .text:
            let fields = keys.map { key in "\(key)=\(quotedIfNeeded(record.metadata[key]!))" }
            return ([time, record.level.description, "\(record.label):", record.message] + fields)
                .joined(separator: " ")
        case .json:
            var members = [
                ("time", time), ("level", record.level.description), ("label", record.label),
                ("message", record.message),
            ]
            members += keys.map { ($0, record.metadata[$0]!) }
            return "{" + members.map { "\(jsonString($0.0)):\(jsonString($0.1))" }.joined(separator: ",") + "}"
        }
    }

    static func timestamp(_ date: Date) -> String {
        // Whole seconds for gmtime, and the millisecond within the second (a wall-clock instant, never
        // epoch milliseconds on the wire: those are StoreModel's EpochMilliseconds).
        let interval = date.timeIntervalSince1970.isFinite ? date.timeIntervalSince1970 : 0
        let seconds = min(max(interval.rounded(.down), -1e15), 1e15)
        var time = time_t(seconds)
        let millisecond = min(999, max(0, Int((interval - seconds) * 1_000)))
        var parts = tm()
        gmtime_r(&time, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
            Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), millisecond)
    }

    static func quotedIfNeeded(_ value: String) -> String {
        value.isEmpty || value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline })
            ? jsonString(value) : value
    }

    static func jsonString(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// Keeps records in memory, for tests.
public final class InMemoryLogHandler: LogHandler {
    private let storage = Mutex<[LogRecord]>([])

    public init() {}

    public func write(_ record: LogRecord) { storage.withLock { $0.append(record) } }

    public var records: [LogRecord] { storage.withLock { $0 } }
}
