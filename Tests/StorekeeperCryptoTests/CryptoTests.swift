import Dispatch
import Foundation
import StorekeeperASN1
import StorekeeperCrypto
import StorekeeperTestSupport
import Synchronization
import Testing

@Suite("OpenSSL wrappers")
struct CryptoTests {
    @Test("SHA-1 and SHA-256 match the FIPS 180 test vectors")
    func digests() {
        let abc = Array("abc".utf8)
        #expect(Digest.sha1(abc).hex == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Digest.sha256(abc).hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Digest.sha256([]).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Digest.hash(.sha384, abc).count == 48)
    }

    @Test("A prefix hashed once gives the digests of the whole messages, on many threads at once")
    func prefixDigest() throws {
        // Prefix lengths around SHA's 64- and 128-byte blocks (the state then holds a partial block) and a
        // JWS header's size; suffixes of several lengths, contiguous or not.
        let bytes = (0..<4_000).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
        for algorithm in [DigestAlgorithm.sha256, .sha1, .sha384] {
            for prefixLength in [0, 1, 55, 63, 64, 65, 127, 128, 3_143] {
                let prefix = bytes.prefix(prefixLength)
                let digest = try PrefixDigest(algorithm, prefix: prefix)
                #expect(digest.prefixCount == prefixLength)
                for suffixLength in [0, 1, 64, 857] {
                    let suffix = bytes.suffix(suffixLength)
                    #expect(try digest.hash(appending: suffix) == Digest.hash(algorithm, prefix + suffix))
                }
                // Not contiguous: a reversed view.
                let reversed = bytes.prefix(100).reversed()
                #expect(try digest.hash(appending: reversed) == Digest.hash(algorithm, prefix + Array(reversed)))
            }
        }
        #expect(
            try PrefixDigest(.sha256, prefix: Array("ab".utf8)).hash(appending: Array("c".utf8)).hex
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // One prefix shared by 8 threads, each continuing with messages of its own.
        let shared = try PrefixDigest(.sha256, prefix: bytes.prefix(3_143))
        let failures = Mutex<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { lane in
            for round in 0..<200 {
                let suffix = Array("lane \(lane) round \(round)".utf8)
                if (try? shared.hash(appending: suffix)) != Digest.sha256(bytes.prefix(3_143) + suffix) {
                    failures.withLock { $0.append(lane * 1_000 + round) }
                }
            }
        }
        #expect(failures.withLock { $0 } == [])
    }

    @Test("A digest signed as it is verifies as the message's signature; a digest of the wrong size is refused")
    func signHashed() throws {
        let ec = try PrivateKey.generateP256()
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        let message = Array("header.payload".utf8)
        let digest = Digest.sha256(message)
        let raw = try ec.signRawECDSA(hashed: digest)
        #expect(try ec.publicKey.verify(rawECDSASignature: raw, message: message, digest: .sha256))
        #expect(try !ec.publicKey.verify(rawECDSASignature: raw, message: message + [0], digest: .sha256))
        let signature = try rsa.sign(hashed: digest, algorithm: .rsaPKCS1(.sha256))
        // RSA PKCS #1 v1.5 is deterministic: the same bytes as signing the message.
        #expect(signature == (try rsa.sign(message, algorithm: .rsaPKCS1(.sha256))))
        let short = #expect(throws: CryptoError.self) { try ec.signRawECDSA(hashed: Array(digest.prefix(31))) }
        #expect(short?.code == .invalidInput)
        let mismatched = #expect(throws: CryptoError.self) { try ec.sign(hashed: digest, algorithm: .ecdsa(.sha384)) }
        #expect(mismatched?.code == .invalidInput)
        let wrongKey = #expect(throws: CryptoError.self) { try ec.sign(hashed: digest, algorithm: .rsaPKCS1(.sha256)) }
        #expect(wrongKey?.code == .unsupportedAlgorithm)
    }

    @Test("RSA PKCS #1 v1.5 signatures verify with the key and fail when anything changes")
    func rsa() throws {
        let key = try PrivateKey.generateRSA(bits: 2048)
        let message = Array("receipt payload".utf8)
        for digest in [DigestAlgorithm.sha1, .sha256] {
            let signature = try key.sign(message, algorithm: .rsaPKCS1(digest))
            #expect(signature.count == 256)
            let publicKey = try key.publicKey
            #expect(publicKey.verify(signature: signature, message: message, algorithm: .rsaPKCS1(digest)))
            #expect(!publicKey.verify(signature: signature, message: message + [0], algorithm: .rsaPKCS1(digest)))
            var bad = signature
            bad[10] ^= 1
            #expect(!publicKey.verify(signature: bad, message: message, algorithm: .rsaPKCS1(digest)))
            #expect(!publicKey.verify(signature: signature, message: message, algorithm: .ecdsa(digest)))
        }
    }

    @Test("ECDSA P-256 signatures verify in DER and in JOSE r‖s form")
    func ecdsa() throws {
        let key = try PrivateKey.generateP256()
        let publicKey = try key.publicKey
        let message = Array("header.payload".utf8)
        let raw = try key.signRawECDSA(message)
        #expect(raw.count == 64)
        #expect(publicKey.verify(rawECDSASignature: raw, message: message, digest: .sha256))
        #expect(!publicKey.verify(rawECDSASignature: raw, message: message + [1], digest: .sha256))
        let der = try #require(ECDSASignature.der(fromRaw: raw, fieldSize: 32))
        #expect(publicKey.verify(signature: der, message: message, algorithm: .ecdsa(.sha256)))
        #expect(ECDSASignature.raw(fromDER: der, fieldSize: 32) == raw)
        // A DER signature where r‖s is expected is rejected, not misread.
        #expect(!publicKey.verify(rawECDSASignature: der, message: message, digest: .sha256))
        #expect(ECDSASignature.raw(fromDER: der + [0], fieldSize: 32) == nil)
    }

    @Test("Keys reuse their signing and verification contexts safely: many threads, mixed digests, failures between")
    func reusedContexts() throws {
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        let ec = try PrivateKey.generateP256()
        let rsaPublic = try rsa.publicKey
        let ecPublic = try ec.publicKey
        // Keys read afresh from DER have contexts of their own: a check independent of the pools above.
        let rsaFresh = try PublicKey(derEncoded: rsaPublic.derEncoded)
        let ecFresh = try PublicKey(derEncoded: ecPublic.derEncoded)
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { lane in
            for round in 0..<40 {
                let message = Array("lane \(lane) round \(round)".utf8)
                // The digest changes every call, so a context set up for one digest must not serve another.
                let digest: DigestAlgorithm = round % 2 == 0 ? .sha256 : (lane % 2 == 0 ? .sha1 : .sha384)
                do {
                    let signature = try rsa.sign(message, algorithm: .rsaPKCS1(digest))
                    let raw = try ec.signRawECDSA(message, digest: digest)
                    var bad = raw
                    bad[5] ^= 1
                    let checks = [
                        rsaFresh.verify(signature: signature, message: message, algorithm: .rsaPKCS1(digest)),
                        rsaPublic.verify(signature: signature, message: message, algorithm: .rsaPKCS1(digest)),
                        !rsaPublic.verify(signature: signature, message: message + [0], algorithm: .rsaPKCS1(digest)),
                        !ecPublic.verify(rawECDSASignature: bad, message: message, digest: digest),
                        ecPublic.verify(rawECDSASignature: raw, message: message, digest: digest),
                        ecFresh.verify(rawECDSASignature: raw, message: message, digest: digest),
                    ]
                    if checks.contains(false) {
                        failures.withLock { $0.append("lane \(lane) round \(round): \(checks)") }
                    }
                } catch {
                    failures.withLock { $0.append("lane \(lane) round \(round): \(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 } == [])
        // One thread signing one message again and again gets the same reused context each time: ECDSA draws
        // a fresh nonce for every signature all the same (a repeated r would give the key away).
        let message = Array("same message".utf8)
        let rs = try (0..<4).map { _ in Array(try ec.signRawECDSA(message).prefix(32)) }
        #expect(Set(rs).count == 4)
        // A key of the wrong type for the algorithm is refused before any context is made.
        #expect(throws: CryptoError.self) { try ec.sign([1], algorithm: .rsaPKCS1(.sha256)) }
        #expect(throws: CryptoError.self) { try rsa.signRawECDSA([1]) }
    }

    @Test("Keys round-trip through PEM; a private key's description shows no key material")
    func pem() throws {
        let key = try PrivateKey.generateP256()
        let pem = try key.pemPKCS8()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reloaded = try PrivateKey(pem: pem)
        let signature = try reloaded.signRawECDSA([1, 2, 3])
        #expect(try key.publicKey.verify(rawECDSASignature: signature, message: [1, 2, 3], digest: .sha256))
        #expect(!key.description.contains("PRIVATE"))
        #expect(key.description.contains("redacted"))
        #expect(throws: CryptoError.self) { try PrivateKey(pem: "not a key") }
    }

    @Test("Certificates parse from DER and PEM, with validity, subject, serial and marker extensions")
    func certificates() throws {
        let pki = TestPKI.shared
        let leaf = try Certificate(derEncoded: pki.leaf.derEncoded)
        #expect(leaf == pki.leaf)
        #expect(leaf.notBefore == TestPKI.leafValidity.0)
        #expect(leaf.notAfter == TestPKI.leafValidity.1)
        #expect(leaf.subject == "CN=Storekeeper Receipt Signing,O=Storekeeper Tests,C=US")
        #expect(leaf.issuer.contains("Worldwide Developer Relations"))
        #expect(leaf.serialNumber == [0x03, 0x7f])
        #expect(leaf.hasExtension(AppleOID.receiptSigningLeaf))
        #expect(!leaf.hasExtension(AppleOID.wwdrIntermediate))
        #expect(pki.intermediate.hasExtension(AppleOID.wwdrIntermediate))
        let both = try Certificate.parsePEM(pki.leaf.pemEncoded + pki.root.pemEncoded)
        #expect(both == [pki.leaf, pki.root])
        #expect(try Certificate.load(Array(pki.root.pemEncoded.utf8)) == [pki.root])
        #expect(try Certificate.load(pki.root.derEncoded) == [pki.root])
        #expect(throws: CryptoError.self) { try Certificate(derEncoded: pki.root.derEncoded + [0]) }
        #expect(throws: CryptoError.self) { try Certificate(derEncoded: [0x30, 0x00]) }
    }

    @Test("Chains: valid inside the window, not outside; missing markers and unknown roots rejected")
    func chains() throws {
        let pki = TestPKI.shared
        let policy = ChainPolicy.appleThreeLevel(
            leafMarker: AppleOID.receiptSigningLeaf, intermediateMarker: AppleOID.wwdrIntermediate)
        let verifier = ChainVerifier(trustedRoots: [pki.root], policy: policy)
        guard
            case .valid(let chain) = verifier.verify(
                signer: pki.leaf, others: [pki.intermediate], at: TestPKI.referenceDate)
        else {
            Issue.record("valid chain rejected")
            return
        }
        #expect(chain.certificates == [pki.leaf, pki.intermediate, pki.root])
        #expect(chain.validFrom == TestPKI.leafValidity.0)
        if case .invalid(let failure) = verifier.verify(
            signer: pki.leaf, others: [pki.intermediate], at: Date(timeIntervalSince1970: 0))
        {
            #expect(failure.code == .notValidAtTime)
        } else {
            Issue.record("expired chain accepted")
        }
        if case .invalid(let failure) = verifier.verify(signer: pki.leaf, others: [], at: TestPKI.referenceDate) {
            #expect(failure.code == .untrusted)
        } else {
            Issue.record("chain without its intermediate accepted")
        }
        let noMarker = try TestPKI(leafMarker: false)
        let other = ChainVerifier(trustedRoots: [noMarker.root], policy: policy)
        if case .invalid(let failure) = other.verify(
            signer: noMarker.leaf, others: [noMarker.intermediate], at: TestPKI.referenceDate)
        {
            #expect(failure.code == .missingExtension)
        } else {
            Issue.record("leaf without its marker accepted")
        }
        // The embedded root is never trusted for being embedded.
        let stranger = ChainVerifier(trustedRoots: [noMarker.root], policy: policy)
        if case .valid = stranger.verify(
            signer: pki.leaf, others: [pki.intermediate, pki.root], at: TestPKI.referenceDate)
        {
            Issue.record("an embedded root was trusted")
        }
    }

    @Test(
        "ES256's curve: a P-256 key is P-256; a P-384 key (made by the openssl tool) and an RSA key are not",
        .enabled(if: ExternalTool.find("openssl") != nil, "openssl not on PATH"))
    func curves() throws {
        #expect(try PrivateKey.generateP256().publicKey.isP256)
        #expect(try !TestPKI.shared.leaf.publicKey.isP256, "RSA")
        let openssl = try #require(ExternalTool.find("openssl"))
        let directory = try ExternalTool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = directory.appendingPathComponent("p384.pem").path
        #expect(
            try ExternalTool.run(openssl, ["ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", key]).status
                == 0)
        let spki = try ExternalTool.run(openssl, ["ec", "-in", key, "-pubout", "-outform", "DER"])
        #expect(spki.status == 0)
        let p384 = try PublicKey(derEncoded: spki.stdout)
        #expect(p384.isEC && !p384.isP256)
    }

    @Test("Only valid paths are cached: certificates that fail, however many, leave the cache as it was")
    func failuresNotCached() throws {
        let pki = TestPKI.shared
        let policy = ChainPolicy.appleThreeLevel(
            leafMarker: AppleOID.receiptSigningLeaf, intermediateMarker: AppleOID.wwdrIntermediate)
        let verifier = ChainVerifier(trustedRoots: [pki.root], policy: policy, cacheLimit: 4096)
        _ = verifier.evaluate(signer: pki.leaf.derEncoded, others: [pki.intermediate.derEncoded])
        #expect(verifier.cachedPaths == 1)
        // Garbage of one length and one tail (the cache's hash reads the tails), and paths that parse but do
        // not chain to the root.
        for index in 0..<200 {
            var garbage = [UInt8](repeating: UInt8(index % 251), count: 4_096)
            garbage.replaceSubrange(4_080..<4_096, with: repeatElement(0x5a, count: 16))
            garbage[0] = UInt8(index / 251)
            _ = verifier.evaluate(signer: garbage, others: [garbage])
        }
        let stranger = try TestPKI(leafMarker: true)
        _ = verifier.evaluate(signer: stranger.leaf.derEncoded, others: [stranger.intermediate.derEncoded])
        #expect(verifier.cachedPaths == 1)
        if case .valid = verifier.evaluate(signer: pki.leaf.derEncoded, others: [pki.intermediate.derEncoded])
            .structure
        {
        } else {
            Issue.record("the valid path no longer verifies")
        }
    }

    @Test("PKCS #7 signed-data made here verifies with OpenSSL's CMS verifier")
    func pkcs7() throws {
        let pki = TestPKI.shared
        let content = Array("payload".utf8)
        let signed = try PKCS7.sign(
            content: content, signer: pki.leaf, key: pki.leafKey, chain: [pki.intermediate, pki.root], digest: .sha1)
        #expect(try PKCS7.verifyWithOpenSSL(signed, trustedRoots: [pki.root], at: TestPKI.referenceDate) == content)
        #expect(throws: CryptoError.self) {
            try PKCS7.verifyWithOpenSSL(signed, trustedRoots: [pki.root], at: Date(timeIntervalSince1970: 0))
        }
        #expect(throws: CryptoError.self) {
            try PKCS7.verifyWithOpenSSL(signed, trustedRoots: [], at: TestPKI.referenceDate)
        }
    }

    @Test("Secure random bytes are the requested length and differ between calls")
    func random() throws {
        let first = try SecureRandom.bytes(32)
        let second = try SecureRandom.bytes(32)
        #expect(first.count == 32)
        #expect(first != second)
        #expect(try SecureRandom.bytes(0).isEmpty)
    }
}

extension Array where Element == UInt8 {
    var hex: String { map { String(format: "%02x", $0) }.joined() }
}
