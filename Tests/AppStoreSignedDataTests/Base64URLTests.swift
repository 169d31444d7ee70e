import AppStoreSignedData
import Foundation
import Testing

@Suite("Base64URL")
struct Base64URLTests {
    @Test("Encodings match Foundation's base64 (standard with padding; URL alphabet without) at every length")
    func matchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<200 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let standard = Data(bytes).base64EncodedString()
            #expect(Base64URL.standard(bytes) == standard, "length \(length)")
            let url = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.encode(bytes) == url, "length \(length)")
            #expect(Base64URL.decode(Array(Base64URL.encode(bytes).utf8)) == bytes)
            // Appended after what the array holds, from contiguous bytes and from a lazy collection alike.
            var appended = Array("ab.".utf8)
            Base64URL.append(bytes, to: &appended)
            #expect(appended == Array(("ab." + url).utf8), "length \(length)")
            var lazy: [UInt8] = []
            Base64URL.append(bytes.lazy.map { $0 }, to: &lazy)
            #expect(lazy == Array(url.utf8), "length \(length)")
        }
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
    }

    /// Decodes one bit at a time, as RFC 4648 describes it: what the fast decoder must agree with.
    static func referenceDecode(_ text: [UInt8]) -> [UInt8]? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var bits: [Bool] = []
        for character in text {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            for shift in (0..<6).reversed() { bits.append(value >> shift & 1 == 1) }
        }
        let whole = bits.count / 8 * 8
        // Leftover bits: fewer than 6 (else a character carried no byte), and all zero.
        guard bits.count - whole < 6, !bits[whole...].contains(true) else { return nil }
        return stride(from: 0, to: whole, by: 8).map { start in
            bits[start..<start + 8].reduce(UInt8(0)) { $0 << 1 | ($1 ? 1 : 0) }
        }
    }

    @Test("Decoding agrees with a bit-by-bit decoder at every length, for valid, non-canonical and foreign text")
    func decodeMatchesReference() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let foreign: [UInt8] = [0x3D, 0x2B, 0x2F, 0x2E, 0x0A, 0x20, 0x00, 0x80, 0xFF]  // = + / . newline space NUL
        var accepted = 0
        var refused = 0
        for length in 0..<70 {
            for trial in 0..<40 {
                var text = (0..<length).map { _ in alphabet.randomElement(using: &generator)! }
                // A quarter with one foreign byte somewhere (each position in turn over the trials).
                if trial % 4 == 3, length > 0 { text[(trial / 4) % length] = foreign.randomElement(using: &generator)! }
                let expected = Self.referenceDecode(text)
                #expect(Base64URL.decode(text) == expected, "\(String(decoding: text, as: UTF8.self))")
                // A slice of a larger array, as a token's segments are, decodes the same.
                let framed = Array("a.".utf8) + text + Array(".b".utf8)
                #expect(Base64URL.decode(framed[2..<(2 + length)]) == expected)
                if expected == nil { refused += 1 } else { accepted += 1 }
            }
        }
        // Both kinds were tried (random last characters are often non-canonical).
        #expect(accepted > 500 && refused > 500)
    }
}
