import Foundation
import StorekeeperHTTP
import StorekeeperJSON

/// A control-plane request body read strictly: a JSON object whose members are all known to the route,
/// each of the right type and within its bounds; anything else is a 400 that names the member.
struct RequestBody {
    let object: JSONObject

    /// The longest string any member may hold, in UTF-8 bytes, unless a member says otherwise.
    static let maxString = 256

    /// Parses the body (an empty one reads as `{}`) and refuses members not in `allowed`.
    init(_ request: HTTPRequest, allowed: Set<String>) throws {
        if request.body.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }) {
            object = JSONObject()
            return
        }
        object = try request.jsonObject()
        for member in object.members where !allowed.contains(member.key) {
            let known = allowed.sorted().joined(separator: ", ")
            throw EmulatorError.invalid(
                "unknown member '\(Self.printable(member.key))'"
                    + (known.isEmpty ? " (this route takes no body)" : " (known: \(known))"))
        }
    }

    func has(_ name: String) -> Bool { object[name] != nil }

    /// A string member of at most `maxBytes` UTF-8 bytes, without control characters.
    func string(_ name: String, maxBytes: Int = maxString, required: Bool = false) throws -> String? {
        guard let value = object[name] else {
            if required { throw EmulatorError.invalid("member '\(name)' is required") }
            return nil
        }
        guard let text = value.stringValue else { throw EmulatorError.invalid("member '\(name)' must be a string") }
        guard text.utf8.count <= maxBytes else {
            throw EmulatorError.invalid("member '\(name)' is longer than \(maxBytes) bytes")
        }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw EmulatorError.invalid("member '\(name)' contains control characters")
        }
        return text
    }

    /// An integer member within `range` (`1.5`, `"3"`, `true` and out-of-range numbers are refused).
    func integer(_ name: String, in range: ClosedRange<Int64>) throws -> Int64? {
        guard let value = object[name] else { return nil }
        guard case .integer(let number) = value, range.contains(number) else {
            throw EmulatorError.invalid(
                "member '\(name)' must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    func bool(_ name: String) throws -> Bool? {
        guard let value = object[name] else { return nil }
        guard let flag = value.boolValue else { throw EmulatorError.invalid("member '\(name)' must be true or false") }
        return flag
    }

    func uuid(_ name: String) throws -> UUID? {
        guard let text = try string(name, maxBytes: 36) else { return nil }
        guard let uuid = UUID(uuidString: text) else { throw EmulatorError.invalid("member '\(name)' must be a UUID") }
        return uuid
    }

    /// One of a fixed set of values; the error lists them.
    func choice<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type) throws -> Value?
    where Value.RawValue == String {
        guard let text = try string(name) else { return nil }
        guard let value = Value(rawValue: text) else {
            throw EmulatorError.invalid(
                "member '\(name)' must be one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    /// A member that may be explicitly `null`: `.some(nil)` for null, nil when absent.
    func nullableChoice<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type) throws -> Value??
    where Value.RawValue == String {
        guard let value = object[name] else { return nil }
        if value == .null { return .some(nil) }
        guard let choice = try choice(name, type) else { return nil }
        return .some(choice)
    }

    /// A name fit for an error message (unknown keys come from the client).
    static func printable(_ text: String) -> String {
        let cleaned = String(text.unicodeScalars.filter { $0.properties.generalCategory != .control }.prefix(64))
        return text.count > 64 ? cleaned + "…" : cleaned
    }
}
