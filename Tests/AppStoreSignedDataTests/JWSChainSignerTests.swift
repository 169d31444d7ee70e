import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

@Suite("JWSChainSigner: one key and chain, the header encoded once")
struct JWSChainSignerTests {
    @Test("Header and payload segments are byte for byte JWSSigner's, and the result verifies")
    func sameAsJWSSigner() throws {
        let chain = JWSFixtures.chain
        let payload = JWSFixtures.transaction()
        let signer = try JWSChainSigner(key: chain.leafKey, chain: [chain.leaf, chain.intermediate, chain.root])
        let fast = try signer.sign(payload)
        let plain = try JWSFixtures.sign(payload)
        // ECDSA signatures differ run to run; what they cover must not.
        #expect(fast.split(separator: ".").prefix(2) == plain.split(separator: ".").prefix(2))
        let verifier = try SignedDataVerifier(
            SignedDataVerifier.Configuration(trustedRoots: [chain.root], bundleID: JWSFixtures.bundleID))
        let result = verifier.verify(fast, as: .transaction, now: Date(timeIntervalSince1970: 1_700_000_000))
        #expect(result.isOK, "\(result.status) \(result.reason ?? "")")
    }

    @Test("A key that is not P-256 is refused")
    func refusesRSA() throws {
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        #expect(throws: (any Error).self) { _ = try JWSChainSigner(key: rsa, chain: []) }
    }
}
