import AppStoreServerAPI
import AppStoreSignedData
import Foundation
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Synchronization
import Testing

/// Online checks against OCSP responses made by the `openssl ocsp` tool from an index of our own chain,
/// through a transport that never touches the network.
@Suite("OCSP online checks", .enabled(if: ExternalTool.find("openssl") != nil, "openssl not on PATH"))
struct OCSPTests {
    /// A chain valid now whose leaf and intermediate name an OCSP responder, and its files for openssl.
    final class Responder: OCSPTransport, Sendable {
        let chain: SigningChain
        let directory: URL
        let calls = Mutex(0)
        let revokedLeaf: Bool
        let reply: @Sendable (Int) -> Result<[UInt8]?, OCSPTransportError>

        init(
            revokedLeaf: Bool = false,
            reply: @escaping @Sendable (Int) -> Result<[UInt8]?, OCSPTransportError> = { _ in .success(nil) }
        )
            throws
        {
            let now = Date()
            var options = SigningChain.Options(
                caValidity: (now - 86_400, now + 3_650 * 86_400), leafValidity: (now - 86_400, now + 365 * 86_400))
            options.keyKind = .p256
            options.ocspURL = "http://127.0.0.1:9/ocsp"
            chain = try SigningChain(options)
            directory = try ExternalTool.temporaryDirectory()
            self.revokedLeaf = revokedLeaf
            self.reply = reply
            for (name, text) in [
                ("root.pem", chain.root.pemEncoded), ("root-key.pem", try chain.rootKey.pemPKCS8()),
                ("intermediate.pem", chain.intermediate.pemEncoded),
                ("intermediate-key.pem", try chain.intermediateKey.pemPKCS8()),
            ] {
                try Data(text.utf8).write(to: directory.appendingPathComponent(name))
            }
            func row(_ certificate: Certificate, revoked: Bool) -> String {
                let serial = certificate.serialNumber.map { String(format: "%02X", $0) }.joined()
                return (revoked ? "R\t300101000000Z\t240101000000Z" : "V\t300101000000Z\t")
                    + "\t\(serial)\tunknown\t/CN=x\n"
            }
            try Data(row(chain.intermediate, revoked: false).utf8).write(
                to: directory.appendingPathComponent("root-index.txt"))
            try Data(row(chain.leaf, revoked: revokedLeaf).utf8).write(
                to: directory.appendingPathComponent("intermediate-index.txt"))
        }

        /// Answers the intermediate's request (first of each pair) as the root, the leaf's as the intermediate.
        func post(_ body: [UInt8], to url: String) async throws(OCSPTransportError) -> [UInt8] {
            let call = calls.withLock { count in
                count += 1
                return count
            }
            switch reply(call) {
            case .failure(let error): throw error
            case .success(let fixed?): return fixed
            case .success(nil): break
            }
            let issuer = call % 2 == 1 ? "root" : "intermediate"
            let request = directory.appendingPathComponent("request-\(call).der")
            let response = directory.appendingPathComponent("response-\(call).der")
            do {
                try Data(body).write(to: request)
                let path = { (name: String) in self.directory.appendingPathComponent(name).path }
                let run = try ExternalTool.run(
                    ExternalTool.find("openssl")!,
                    [
                        "ocsp", "-index", path("\(issuer)-index.txt"), "-CA", path("\(issuer).pem"), "-rsigner",
                        path("\(issuer).pem"),
                        "-rkey", path("\(issuer)-key.pem"), "-reqin", request.path, "-respout", response.path, "-ndays",
                        "1",
                    ])
                guard run.status == 0 else { throw OCSPTransportError("openssl ocsp failed: \(run.stderrText)") }
                return Array(try Data(contentsOf: response))
            } catch let error as OCSPTransportError {
                throw error
            } catch {
                throw OCSPTransportError("\(error)")
            }
        }

        func verifier() throws -> SignedDataVerifier {
            try SignedDataVerifier(
                .init(
                    trustedRoots: [chain.root], bundleID: JWSFixtures.bundleID, environment: "Sandbox",
                    onlineChecks: true),
                ocspTransport: self)
        }

        func token() throws -> String { try JWSFixtures.sign(JWSFixtures.transaction(), chain: chain) }
    }

    @Test("Good answers for intermediate and leaf: OK, and the answer is cached")
    func good() async throws {
        let responder = try Responder()
        let verifier = try responder.verifier()
        let result = await verifier.verifyOnline(try responder.token(), now: Date())
        #expect(result.status == .ok, "\(result.reason ?? "")")
        #expect(responder.calls.withLock { $0 } == 2)
        #expect(await verifier.verifyOnline(try responder.token(), now: Date()).status == .ok)
        #expect(responder.calls.withLock { $0 } == 2)
    }

    @Test("The synchronous verify never goes online: with online checks configured it is retryable, not OK")
    func synchronousRefuses() throws {
        let responder = try Responder()
        let result = try responder.verifier().verify(try responder.token(), now: Date())
        #expect(result.status == .retryableVerificationFailure)
        #expect(result.reason?.contains("verifyOnline") == true)
        #expect(responder.calls.withLock { $0 } == 0)
    }

    @Test("The Server API client verifies its answers online when its verifier is configured for online checks")
    func serverAPIClientOnline() async throws {
        let responder = try Responder()
        let signed = try responder.token()
        var router = Router()
        router.add(
            "GET", "/inApps/v1/transactions/{id}",
            inline: { _, _ in
                HTTPResponse(
                    status: 200, headers: [("Content-Type", "application/json")],
                    body: JSONWriter.bytes(.object(["signedTransactionInfo": .string(signed)])))
            })
        let server = try HTTPServer(port: 0, responder: router.freeze())
        defer { server.stop() }
        let client = AppStoreServerAPIClient(
            key: try PrivateKey.generateP256(), keyID: "K", issuerID: "I", bundleID: JWSFixtures.bundleID,
            environment: .custom("http://127.0.0.1:\(server.port)"), retry: .none, verifier: try responder.verifier())
        let answer = try await client.transactionInfo("2000000335310644")
        #expect(answer.signedTransactionInfo == signed)
        #expect(responder.calls.withLock { $0 } == 2, "the intermediate's and the leaf's OCSP answers asked for")
    }

    @Test("A revoked leaf is a verification failure")
    func revoked() async throws {
        let responder = try Responder(revokedLeaf: true)
        let result = try await responder.verifier().verifyOnline(try responder.token(), now: Date())
        #expect(result.status == .verificationFailure)
        #expect(result.reason?.contains("revoked") == true)
    }

    @Test("An unreachable responder is RETRYABLE_VERIFICATION_FAILURE; a garbage answer is VERIFICATION_FAILURE")
    func failures() async throws {
        let unreachable = try Responder(reply: { _ in .failure(OCSPTransportError("connection refused")) })
        #expect(
            try await unreachable.verifier().verifyOnline(try unreachable.token(), now: Date()).status
                == .retryableVerificationFailure)
        let garbage = try Responder(reply: { _ in .success([0x30, 0x03, 0x0a, 0x01, 0x00]) })
        #expect(
            try await garbage.verifier().verifyOnline(try garbage.token(), now: Date()).status == .verificationFailure)
    }

    @Test("The real transport reports a refused connection as retryable")
    func realTransport() async throws {
        let responder = try Responder()
        let verifier = try SignedDataVerifier(
            .init(
                trustedRoots: [responder.chain.root], bundleID: JWSFixtures.bundleID, environment: "Sandbox",
                onlineChecks: true))
        // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
        #expect(await verifier.verifyOnline(try responder.token(), now: Date()).status == .retryableVerificationFailure)
    }
}
