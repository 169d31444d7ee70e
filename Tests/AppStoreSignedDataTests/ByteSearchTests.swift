import AppStoreSignedData
import Testing

/// `StoredJWS.firstRange`, the one `memchr` search the JWS code and the purchase server's stored inputs use,
/// against a byte-by-byte reference: in arrays and in slices that do not start at 0, from every start.
@Suite("Byte search: memchr and memcmp, in arrays and slices")
struct ByteSearchTests {
    /// The first index at or after `from` where `pattern` starts, comparing byte by byte.
    static func reference(_ pattern: [UInt8], in bytes: ArraySlice<UInt8>, from: Int) -> Int? {
        guard !pattern.isEmpty, from >= bytes.startIndex else { return nil }
        var index = from
        while index + pattern.count <= bytes.endIndex {
            if bytes[index..<(index + pattern.count)].elementsEqual(pattern) { return index }
            index += 1
        }
        return nil
    }

    @Test("Every pattern of a small alphabet, in every slice of a haystack, from every start")
    func matchesReference() {
        // Dots and near-misses: a pattern's first byte often found where the rest does not follow.
        let haystack = Array("a.b..~.\"~.x.~~\"~..y.".utf8)
        let patterns = [".", "~.", "\"~.", "..", ".x.", "z", "~~\"~..y.", "a.b..~.\"~.x.~~\"~..y.!"].map {
            Array($0.utf8)
        }
        var compared = 0
        for lower in 0...haystack.count {
            for upper in lower...haystack.count {
                let slice = haystack[lower..<upper]
                for pattern in patterns {
                    for from in (lower - 1)...(upper + 1) {
                        let expected = Self.reference(pattern, in: slice, from: from)
                        #expect(
                            StoredJWS.firstRange(of: pattern, in: slice, from: from) == expected,
                            "\(String(decoding: pattern, as: UTF8.self)) in \(lower)..<\(upper) from \(from)")
                        compared += 1
                    }
                    #expect(
                        StoredJWS.firstRange(of: pattern, in: slice) == Self.reference(pattern, in: slice, from: lower))
                }
            }
        }
        for pattern in patterns {
            for from in 0...haystack.count {
                #expect(
                    StoredJWS.firstRange(of: pattern, in: haystack, from: from)
                        == Self.reference(pattern, in: haystack[...], from: from))
            }
        }
        #expect(compared > 10_000)
        #expect(StoredJWS.firstRange(of: [], in: haystack) == nil)
    }
}
