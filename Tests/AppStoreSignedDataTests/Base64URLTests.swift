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
}
