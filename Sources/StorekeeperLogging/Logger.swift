public import Foundation
import StoreModel
import StoreTime
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

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

    public func log(_ level: Level, _ message: @autoclosure () -> String, _ extra: LogFields = [:]) {
        guard level >= self.level else { return }
        var fields: [(String, String)]
        if metadata.isEmpty {
            fields = extra.pairs  // the call's own array, copied only when a value needs redacting
        } else {
            // The logger's own (sorted, less the keys the call sets), then the call's.
            fields = []
            fields.reserveCapacity(metadata.count + extra.pairs.count)
            for (key, value) in metadata.sorted(by: { $0.key < $1.key })
            where !extra.pairs.contains(where: { $0.0 == key }) {
                fields.append((key, value))
            }
            fields.append(contentsOf: extra.pairs)
        }
        for index in fields.indices where Self.isSecretKey(fields[index].0) { fields[index].1 = "<redacted>" }
        handler.write(LogRecord(date: Date(), level: level, label: label, message: message(), fields: fields))
    }

    public func trace(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) { log(.trace, message(), extra) }
    public func debug(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) { log(.debug, message(), extra) }
    public func info(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) { log(.info, message(), extra) }
    public func notice(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) {
        log(.notice, message(), extra)
    }
    public func warning(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) {
        log(.warning, message(), extra)
    }
    public func error(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) { log(.error, message(), extra) }
    public func critical(_ message: @autoclosure () -> String, _ extra: LogFields = [:]) {
        log(.critical, message(), extra)
    }

    /// Whether a metadata key names something that must never be written: any dot-separated part of it
    /// is, or ends with, one of the secret words.
    public static func isSecretKey(_ key: String) -> Bool {
        // Byte by byte over the key's own storage, each dot-separated part compared in place with the words,
        // lower-casing ASCII as it goes: no copy, on every record's every key.
        var copy = key
        return copy.withUTF8 { bytes in
            var start = 0
            for index in 0...bytes.count where index == bytes.count || bytes[index] == 0x2E {
                if index > start, isSecretPart(UnsafeBufferPointer(rebasing: bytes[start..<index])) { return true }
                start = index + 1
            }
            return false
        }
    }

    private static let secretWords: [[UInt8]] = [
        "password", "secret", "token", "key", "authorization", "receipt", "jws", "signed", "cookie",
    ].map { Array($0.utf8) }

    private static func lower(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte }

    /// For each byte, the secret words (bits by index) that start with it, and that end with it: a part is
    /// compared only with the words that could start or end it.
    private static let startingWith: [UInt16] = words { $0.first! }
    private static let endingWith: [UInt16] = words { $0.last! }

    private static func words(by byte: ([UInt8]) -> UInt8) -> [UInt16] {
        var table = [UInt16](repeating: 0, count: 256)
        for (index, word) in secretWords.enumerated() { table[Int(byte(word))] |= 1 << index }
        return table
    }

    private static func isSecretPart(_ part: UnsafeBufferPointer<UInt8>) -> Bool {
        let candidates = startingWith[Int(lower(part[0]))] | endingWith[Int(lower(part[part.count - 1]))]
        guard candidates != 0 else { return false }
        return secretWords.indices.contains { index in
            let word = secretWords[index]
            guard candidates & (1 << index) != 0, part.count >= word.count else { return false }
            var starts = true
            var ends = true
            let tail = part.count - word.count
            for offset in 0..<word.count {
                if starts, lower(part[offset]) != word[offset] { starts = false }
                if ends, lower(part[tail + offset]) != word[offset] { ends = false }
                if !starts && !ends { return false }
            }
            return true
        }
    }
}

/// A log call's own metadata, written as a dictionary literal (`["response.status": "200"]`) and kept in
/// that order, without building a table: the last key given wins when one is repeated.
public struct LogFields: Sendable, ExpressibleByDictionaryLiteral {
    public var pairs: [(String, String)]

    public init(dictionaryLiteral elements: (String, String)...) { pairs = elements }

    public init(_ metadata: Logger.Metadata) { pairs = metadata.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }
}

/// One log event as a handler receives it (metadata already redacted).
public struct LogRecord: Sendable {
    public var date: Date
    public var level: Logger.Level
    public var label: String
    public var message: String
    /// The metadata in the order it is written: the logger's own, sorted by key, then the call's in its order.
    public var fields: [(String, String)]

    public init(date: Date, level: Logger.Level, label: String, message: String, fields: [(String, String)]) {
        self.date = date
        self.level = level
        self.label = label
        self.message = message
        self.fields = fields
    }

    public init(date: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) {
        self.init(date: date, level: level, label: label, message: message, fields: LogFields(metadata).pairs)
    }

    /// The metadata as a table (a repeated key: its last value).
    public var metadata: Logger.Metadata {
        get { Dictionary(fields, uniquingKeysWith: { $1 }) }
        set { fields = LogFields(newValue).pairs }
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

/// Writes one line per record to a file (standard error by default), as text
/// (`2026-12-01T10:00:00.123Z info emulator: request answered request.id=… response.status=200`) or as JSON.
///
/// Lines are rendered on the caller's thread into a buffer and written off the request path: by a thread of
/// the handler's every `flushEvery`, by the caller when the buffer passes 64 KiB, on ``flush()``, and at
/// process exit (``flushAll()`` runs from `atexit`), in the order they were logged. A record costs a
/// rendering and an append, not a system call.
public final class StreamLogHandler: LogHandler {
    public enum Format: String, Sendable, CaseIterable { case text, json }

    private let format: Format
    /// Kept open as long as the handler lives (a FileHandle closes its descriptor when it goes).
    private let output: FileHandle
    private let descriptor: Int32
    private let buffer = Mutex<[UInt8]>([])
    /// Held while a flush takes the buffer and writes it: flushes do not overtake one another.
    private let writing = Mutex<Void>(())
    private let stopped = Atomic<Bool>(false)
    static let highWater = 64 << 10

    public init(format: Format = .text, output: FileHandle = .standardError, flushEvery: Duration = .milliseconds(100))
    {
        self.format = format
        self.output = output
        self.descriptor = output.fileDescriptor
        Self.register(self)
        // 1 ms to 10 minutes.
        let microseconds = min(max(flushEvery, .zero), .seconds(600)).wholeMicroseconds
        let interval = UInt32(min(max(microseconds, 1_000), 600_000_000))
        let thread = Thread { [weak self] in
            while true {
                usleep(interval)
                guard let handler = self, !handler.stopped.load(ordering: .relaxed) else { return }
                handler.flush()
            }
        }
        thread.name = "storekeeper.log.flush"
        thread.start()
    }

    deinit {
        stopped.store(true, ordering: .relaxed)
        flush()
    }

    public func write(_ record: LogRecord) {
        var line = Self.renderBytes(record, format: format)
        line.append(0x0A)
        let size = buffer.withLock { pending in
            pending.append(contentsOf: line)
            return pending.count
        }
        if size >= Self.highWater { flush() }
    }

    /// Writes what is buffered now.
    public func flush() {
        writing.withLock { _ in
            let pending = buffer.withLock { pending -> [UInt8] in
                defer { pending.removeAll(keepingCapacity: true) }
                return pending
            }
            var offset = 0
            pending.withUnsafeBytes { bytes in
                while offset < bytes.count {
                    let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if written > 0 {
                        offset += written
                    } else if written < 0 && errno == EINTR {
                        continue
                    } else {
                        return  // the output is gone (closed, full disk): the lines cannot be written anywhere
                    }
                }
            }
        }
    }

    // MARK: Every handler, flushed at exit

    private struct Weak: @unchecked Sendable { weak var handler: StreamLogHandler? }
    private static let handlers = Mutex<[Weak]>([])
    private static let atExit: Void = { atexit { StreamLogHandler.flushAll() } }()

    static func register(_ handler: StreamLogHandler) {
        _ = atExit
        handlers.withLock { list in
            list.removeAll { $0.handler == nil }
            list.append(Weak(handler: handler))
        }
    }

    /// Writes every handler's buffered lines (at exit, and before a process ends on purpose).
    public static func flushAll() {
        for handler in handlers.withLock({ $0.compactMap(\.handler) }) { handler.flush() }
    }

    // MARK: Rendering

    /// Appends the time as `2026-12-01T10:00:00.123Z` (UTC), worked out with integers: no lock, no table,
    /// no call into the C library for years 0 to 9999 (others, rare, through `gmtime_r`).
    static func appendTimestamp(_ date: Date, to out: inout [UInt8]) {
        let interval = date.timeIntervalSince1970.isFinite ? date.timeIntervalSince1970 : 0
        let seconds = min(max(interval.rounded(.down), -1e15), 1e15)
        let whole = Int64(seconds)
        let millisecond = min(999, max(0, Int((interval - seconds) * 1_000)))
        let days = whole >= 0 ? whole / 86_400 : (whole - 86_399) / 86_400
        let inDay = Int(whole - days * 86_400)
        let (year, month, day) = CivilCalendar.date(days: Int(days))
        guard year >= 0 && year < 10_000 else {
            out.append(contentsOf: secondPrefix(whole).utf8)
            appendDigits(millisecond, 3, separator: 0x2E, to: &out)
            out.append(0x5A)
            return
        }
        appendDigits(year, 4, separator: nil, to: &out)
        appendDigits(month, 2, separator: 0x2D, to: &out)
        appendDigits(day, 2, separator: 0x2D, to: &out)
        appendDigits(inDay / 3_600, 2, separator: 0x54, to: &out)
        appendDigits(inDay / 60 % 60, 2, separator: 0x3A, to: &out)
        appendDigits(inDay % 60, 2, separator: 0x3A, to: &out)
        appendDigits(millisecond, 3, separator: 0x2E, to: &out)
        out.append(0x5A)
    }

    /// `separator` (if any), then `value` in `count` decimal digits (0 ≤ value < 10^count).
    private static func appendDigits(_ value: Int, _ count: Int, separator: UInt8?, to out: inout [UInt8]) {
        if let separator { out.append(separator) }
        var divisor = 1
        for _ in 1..<count { divisor *= 10 }
        while divisor > 0 {
            out.append(UInt8(0x30 + value / divisor % 10))
            divisor /= 10
        }
    }

    /// `2026-12-01T10:00:00` for a second since 1970, in UTC.
    static func secondPrefix(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = Int(parts.tm_year) + 1900
        let yearText =
            year >= 0 && year < 10_000
            ? String(repeating: "0", count: 4 - String(year).count) + String(year) : String(year)
        return
            "\(yearText)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    /// One line without its newline.
    public static func render(_ record: LogRecord, format: Format) -> String {
        String(decoding: renderBytes(record, format: format), as: UTF8.self)
    }

    static func renderBytes(_ record: LogRecord, format: Format) -> [UInt8] {
        let keys = record.fields
        var out: [UInt8] = []
        out.reserveCapacity(160 + keys.count * 24)
        switch format {
        case .text:
            appendTimestamp(record.date, to: &out)
            out.append(0x20)
            out.append(contentsOf: record.level.description.utf8)
            out.append(0x20)
            out.append(contentsOf: record.label.utf8)
            out.append(0x3A)
            out.append(0x20)
            out.append(contentsOf: record.message.utf8)
            for (key, value) in keys {
                out.append(0x20)
                out.append(contentsOf: key.utf8)
                out.append(0x3D)
                appendQuotedIfNeeded(value, to: &out)
            }
        case .json:
            out.append(0x7B)
            var first = true
            func member(_ name: String, _ value: [UInt8], raw: Bool) {
                if !first { out.append(0x2C) }
                first = false
                appendJSONString(name, to: &out)
                out.append(0x3A)
                if raw {
                    out.append(0x22)
                    out += value
                    out.append(0x22)
                } else {
                    appendJSONString(String(decoding: value, as: UTF8.self), to: &out)
                }
            }
            appendJSONString("time", to: &out)
            out.append(contentsOf: [0x3A, 0x22])
            appendTimestamp(record.date, to: &out)
            out.append(0x22)
            first = false
            member("level", Array(record.level.description.utf8), raw: true)
            member("label", Array(record.label.utf8), raw: false)
            member("message", Array(record.message.utf8), raw: false)
            for (key, value) in keys { member(key, Array(value.utf8), raw: false) }
            out.append(0x7D)
        }
        return out
    }

    /// Whether a value is written as it is: not empty, no space, quote, `=`, backslash or control character.
    static func isPlain(_ value: String) -> Bool {
        !value.isEmpty
            && value.utf8.allSatisfy { $0 > 0x20 && $0 != 0x22 && $0 != 0x3D && $0 != 0x5C && $0 != 0x7F }
    }

    static func appendQuotedIfNeeded(_ value: String, to out: inout [UInt8]) {
        if isPlain(value) { out.append(contentsOf: value.utf8) } else { appendJSONString(value, to: &out) }
    }

    static func quotedIfNeeded(_ value: String) -> String {
        var out: [UInt8] = []
        appendQuotedIfNeeded(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    static func appendJSONString(_ value: String, to out: inout [UInt8]) {
        out.append(0x22)
        for byte in value.utf8 {
            switch byte {
            case 0x22: out += [0x5C, 0x22]
            case 0x5C: out += [0x5C, 0x5C]
            case 0x0A: out += [0x5C, 0x6E]
            case 0x0D: out += [0x5C, 0x72]
            case 0x09: out += [0x5C, 0x74]
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += [0x5C, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: out.append(byte)
            }
        }
        out.append(0x22)
    }

    static func jsonString(_ value: String) -> String {
        var out: [UInt8] = []
        appendJSONString(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}

/// Keeps records in memory, for tests.
public final class InMemoryLogHandler: LogHandler {
    private let storage = Mutex<[LogRecord]>([])

    public init() {}

    public func write(_ record: LogRecord) { storage.withLock { $0.append(record) } }

    public var records: [LogRecord] { storage.withLock { $0 } }
}
