public import Foundation
public import StorekeeperJSON

/// A request body read strictly, the same way on every route of both servers: a JSON object whose members
/// are all known to the route, each of the right type and within its bounds; anything else is a 400
/// (`invalid_request`) that names the member and never echoes more than a short prefix of what was sent.
public struct RequestBody: Sendable {
    public let object: JSONObject

    /// The longest string any member may hold, in UTF-8 bytes, unless a member says otherwise.
    public static let maxString = 256

    /// Parses the body (an empty one reads as `{}`) and refuses members not in `allowed`.
    public init(_ request: HTTPRequest, allowed: Set<String>) throws(HTTPError) {
        if request.body.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }) {
            object = JSONObject()
            return
        }
        object = try request.jsonObject()
        for member in object.members where !allowed.contains(member.key) {
            let known = allowed.sorted().joined(separator: ", ")
            throw HTTPError.invalidRequest(
                "unknown member '\(Self.printable(member.key))'"
                    + (known.isEmpty ? " (this route takes no body)" : " (known: \(known))"))
        }
    }

    public func has(_ name: String) -> Bool { object[name] != nil }

    /// A string member of at most `maxBytes` UTF-8 bytes, without control characters.
    public func string(_ name: String, maxBytes: Int = maxString, required: Bool = false) throws(HTTPError)
        -> String?
    {
        guard let value = object[name] else {
            if required { throw HTTPError.invalidRequest("member '\(name)' is required") }
            return nil
        }
        guard let text = value.stringValue else { throw HTTPError.invalidRequest("member '\(name)' must be a string") }
        guard text.utf8.count <= maxBytes else {
            throw HTTPError.invalidRequest("member '\(name)' is longer than \(maxBytes) bytes")
        }
        guard !Self.hasControlCharacter(text) else {
            throw HTTPError.invalidRequest("member '\(name)' contains control characters")
        }
        return text
    }

    /// An integer member within `range` (`1.5`, `"3"`, `true` and out-of-range numbers are refused).
    public func integer(_ name: String, in range: ClosedRange<Int64>) throws(HTTPError) -> Int64? {
        guard let value = object[name] else { return nil }
        guard case .integer(let number) = value, range.contains(number) else {
            throw HTTPError.invalidRequest(
                "member '\(name)' must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    public func bool(_ name: String) throws(HTTPError) -> Bool? {
        guard let value = object[name] else { return nil }
        guard let flag = value.boolValue else {
            throw HTTPError.invalidRequest("member '\(name)' must be true or false")
        }
        return flag
    }

    public func uuid(_ name: String) throws(HTTPError) -> UUID? {
        guard let text = try string(name, maxBytes: 36) else { return nil }
        guard let uuid = UUID(uuidString: text) else {
            throw HTTPError.invalidRequest("member '\(name)' must be a UUID")
        }
        return uuid
    }

    /// One of a fixed set of values; the error lists them.
    public func choice<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type) throws -> Value?
    where Value.RawValue == String {
        guard let text = try string(name) else { return nil }
        guard let value = Value(rawValue: text) else {
            throw HTTPError.invalidRequest(
                "member '\(name)' must be one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    /// A member that may be explicitly `null`: `.some(nil)` for null, nil when absent.
    public func nullableChoice<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type) throws
        -> Value??
    where Value.RawValue == String {
        guard let value = object[name] else { return nil }
        if value == .null { return .some(nil) }
        guard let choice = try choice(name, type) else { return nil }
        return .some(choice)
    }

    /// Whether `text` holds a control character (Unicode's general category Cc: U+0000–U+001F and
    /// U+007F–U+009F), found over its UTF-8 bytes: asking each scalar's properties cost ~10 ns a character,
    /// on receipts of up to 256 KiB.
    public static func hasControlCharacter(_ text: String) -> Bool {
        var previous: UInt8 = 0
        for byte in text.utf8 {
            // U+0080–U+009F are 0xC2 0x80–0x9F; 0xC2 is never a continuation byte.
            if byte < 0x20 || byte == 0x7F || (previous == 0xC2 && byte >= 0x80 && byte <= 0x9F) { return true }
            previous = byte
        }
        return false
    }

    /// A name fit for an error message (unknown keys come from the client).
    public static func printable(_ text: String) -> String {
        let cleaned = String(text.unicodeScalars.filter { $0.properties.generalCategory != .control }.prefix(64))
        return text.count > 64 ? cleaned + "…" : cleaned
    }
}

extension HTTPError {
    /// 400 `invalid_request`: the request is malformed; `message` says which part.
    public static func invalidRequest(_ message: String) -> HTTPError {
        HTTPError(status: 400, code: "invalid_request", message: message)
    }
}
