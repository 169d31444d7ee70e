/// An OBJECT IDENTIFIER, kept as its content octets (X.690 §8.19) and printed in dotted form.
public struct ASN1ObjectIdentifier: Hashable, Sendable, CustomStringConvertible {
    /// The content octets (without tag and length).
    public let contentBytes: [UInt8]

    /// Reads and validates content octets: base-128 groups, minimal, none unterminated.
    public init(contentBytes: [UInt8]) throws {
        guard !contentBytes.isEmpty, contentBytes.count <= 128 else {
            throw ASN1Error.make(.invalidValue, "OBJECT IDENTIFIER of \(contentBytes.count) bytes")
        }
        guard contentBytes.last! & 0x80 == 0 else {
            throw ASN1Error.make(.invalidValue, "OBJECT IDENTIFIER ends inside a component")
        }
        var atStart = true
        for byte in contentBytes {
            if atStart && byte == 0x80 {
                throw ASN1Error.make(.invalidValue, "OBJECT IDENTIFIER component with a leading zero group")
            }
            atStart = byte & 0x80 == 0
        }
        self.contentBytes = contentBytes
    }

    /// Builds an identifier from its arcs, e.g. `[1, 2, 840, 113635, 100, 6, 11, 1]`.
    ///
    /// - Precondition: at least two arcs, the first 0, 1 or 2, the second below 40 unless the first is 2 (then
    ///   at most `UInt64.max - 80`).
    public init(_ arcs: [UInt64]) {
        precondition(
            arcs.count >= 2 && arcs[0] <= 2 && (arcs[0] == 2 || arcs[1] < 40) && arcs[1] <= UInt64.max - 80,
            "invalid OID arcs \(arcs)")
        var bytes: [UInt8] = []
        func append(_ value: UInt64) {
            var groups: [UInt8] = [UInt8(value & 0x7f)]
            var rest = value >> 7
            while rest > 0 {
                groups.append(UInt8(rest & 0x7f) | 0x80)
                rest >>= 7
            }
            bytes.append(contentsOf: groups.reversed())
        }
        append(arcs[0] * 40 + arcs[1])
        for arc in arcs.dropFirst(2) { append(arc) }
        contentBytes = bytes
    }

    /// Parses the dotted form, e.g. `"1.2.840.113549.1.7.2"`.
    public init(dotted: String) throws {
        let parts = dotted.split(separator: ".", omittingEmptySubsequences: false)
        let arcs = parts.compactMap { UInt64($0) }
        // The first two arcs share one component (first × 40 + second): it must fit in 64 bits.
        guard arcs.count == parts.count, arcs.count >= 2, arcs[0] <= 2, arcs[0] == 2 || arcs[1] < 40,
            arcs[1] <= UInt64.max - 80
        else {
            throw ASN1Error.make(.invalidValue, "not a dotted OBJECT IDENTIFIER: \(dotted)")
        }
        self.init(arcs)
    }

    /// The arcs; components too wide for 64 bits are clamped (never produced by ``init(_:)``).
    public var arcs: [UInt64] {
        var values: [UInt64] = []
        var current: UInt64 = 0
        for byte in contentBytes {
            current = current << 7 | UInt64(byte & 0x7f)
            if byte & 0x80 == 0 {
                values.append(current)
                current = 0
            }
        }
        guard let first = values.first else { return [] }
        let head: [UInt64] = first < 40 ? [0, first] : first < 80 ? [1, first - 40] : [2, first - 80]
        return head + values.dropFirst()
    }

    public var description: String { arcs.map(String.init).joined(separator: ".") }
}
