import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreModel
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON

/// `storekeeper jws verify | decode | sign` and `storekeeper offer sign`.
enum JWSCommands {
    static let inputHelp = "A compact JWS, or - for standard input (the default)."

    static let verifySpec = Arguments.Spec(
        command: "storekeeper jws verify",
        abstract: "Verify StoreKit 2 signed data (JWS) as Apple's server libraries do.",
        positionals: [("path", inputHelp)],
        options: [
            .init(
                name: "root", valueName: "cert",
                help: "A trusted root (Apple Root CA - G3), or an Xcode certificate; DER or PEM.", repeatable: true,
                required: true),
            .init(name: "bundle-id", valueName: "id", help: "Expected bundle identifier."),
            .init(
                name: "app-apple-id", valueName: "n",
                help: "Expected app Apple ID (required with --environment Production)."),
            .init(name: "environment", valueName: "name", help: "Production, Sandbox, Xcode or LocalTesting."),
            .init(
                name: "type", valueName: "type",
                help: "auto, transaction, renewal-info, notification or app-transaction (default: auto)."),
            .init(name: "now", valueName: "rfc3339", help: "The current time (default: now)."),
            .init(name: "format", valueName: "json|text", help: "Output format (default: json)."),
        ],
        flags: [
            ("online", "Check leaf and intermediate with OCSP and validate at the current time."),
            (
                "no-strict-checks",
                "Relax OpenSSL's strict certificate checks (needed for Apple's key-identifier-less test chain)."
            ),
        ],
        discussion: """
            Prints {"status", "type", "header", "payload"}; status is one of OK, VERIFICATION_FAILURE, \
            INVALID_APP_IDENTIFIER, INVALID_CERTIFICATE, INVALID_CHAIN_LENGTH, INVALID_CHAIN, INVALID_ENVIRONMENT, \
            RETRYABLE_VERIFICATION_FAILURE, INVALID_JWT_FORMAT. Exit status 0 for OK, 1 otherwise.
            """)

    static let decodeSpec = Arguments.Spec(
        command: "storekeeper jws decode", abstract: "Decode a JWS without verifying it.",
        positionals: [("path", inputHelp)],
        options: [.init(name: "format", valueName: "json|text", help: "Output format (default: json).")])

    static let signSpec = Arguments.Spec(
        command: "storekeeper jws sign", abstract: "Sign a JSON payload as ES256 with an x5c certificate chain.",
        positionals: [("payload", "A JSON object file, or - for standard input (the default).")],
        options: [
            .init(
                name: "key", valueName: "key.pem", help: "The leaf's P-256 private key (PEM, PKCS #8 or SEC 1).",
                required: true),
            .init(
                name: "cert", valueName: "cert", help: "Leaf, then intermediate, then root (DER or PEM).",
                repeatable: true, required: true),
        ])

    static let offerSpec = Arguments.Spec(
        command: "storekeeper offer sign",
        abstract: "Sign a promotional offer with an In-App Purchase key (.p8).",
        options: [
            .init(name: "key", valueName: "key.p8", help: "The In-App Purchase private key.", required: true),
            .init(name: "key-id", valueName: "id", help: "The key's identifier.", required: true),
            .init(name: "bundle-id", valueName: "id", help: "The app's bundle identifier.", required: true),
            .init(name: "product-id", valueName: "id", help: "The subscription product.", required: true),
            .init(name: "offer-id", valueName: "id", help: "The promotional offer identifier.", required: true),
            .init(name: "app-account-token", valueName: "uuid", help: "The app account token (UUID)."),
            .init(name: "nonce", valueName: "uuid", help: "A fresh UUID (default: random)."),
            .init(name: "timestamp", valueName: "ms", help: "UNIX milliseconds (default: now)."),
            .init(
                name: "issuer-id", valueName: "id", help: "The App Store Connect issuer ID (V2 only; default: empty)."),
            .init(
                name: "transaction-id", valueName: "id", help: "Transaction to apply the offer to (V2 only, optional)."),
            .init(name: "format", valueName: "v1|v2", help: "V1 (signature, base64 DER) or V2 (JWS); default: v1."),
        ])

    static func verify(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let format = try ReceiptCommands.outputFormat(arguments)
        var type: SignedDataType?
        switch arguments.value("type") ?? "auto" {
        case "auto": type = nil
        case let name:
            guard let known = SignedDataType(rawValue: name) else {
                throw CommandError.usage("'\(name)' is not a --type")
            }
            type = known
        }
        let environment = try AppStoreCommands.environment(arguments, among: Environment.allCases)
        var appAppleID: Int64?
        if let text = arguments.value("app-apple-id") {
            guard let value = Int64(text) else {
                throw CommandError.usage("'\(text)' is not a number for --app-apple-id")
            }
            appAppleID = value
        }
        var current = now
        if let text = arguments.value("now") {
            guard let date = ReceiptDate.parse(text) else {
                throw CommandError.usage("'\(text)' is not an RFC 3339 date for --now")
            }
            current = date
        }
        if environment == "Production" && appAppleID == nil {
            throw CommandError.usage("--environment Production needs --app-apple-id, as Apple's libraries require")
        }
        let configuration = SignedDataVerifier.Configuration(
            trustedRoots: try loadCertificates(arguments.all("root")), bundleID: arguments.value("bundle-id"),
            appAppleID: appAppleID, environment: environment, onlineChecks: arguments.flag("online"),
            strictChecks: !arguments.flag("no-strict-checks"))
        let verifier: SignedDataVerifier
        do {
            verifier = try SignedDataVerifier(configuration, ocspTransport: CurlOCSPTransport())
        } catch {
            throw CommandError.usage(error.description)
        }
        let token = try readToken(arguments.positional(0), console: console)
        let (kind, at) = (type, current)
        let result =
            configuration.onlineChecks
            ? await verifier.verifyOnline(token, as: kind, now: at)
            : verifier.verify(token, as: type, now: current)
        let failedCheck: String? =
            switch result.status {
            case .ok: nil
            case .invalidJWTFormat: "format"
            case .invalidAppIdentifier: "bundleId"
            case .invalidEnvironment: "environment"
            case .retryableVerificationFailure: "online"
            case .invalidChainLength, .invalidCertificate, .invalidChain: "chain"
            default: result.reason?.contains("signature") == true ? "signature" : "chain"
            }
        var skipped: [String: String] = [:]
        if configuration.bundleID == nil { skipped["bundleId"] = "no --bundle-id given" }
        if configuration.environment == nil { skipped["environment"] = "no --environment given" }
        if configuration.environment != "Production" {
            skipped["appAppleId"] = "checked in Production only, as Apple's libraries do"
        }
        if !configuration.onlineChecks { skipped["online"] = "no --online (OCSP not asked)" }
        let checks = CheckReport(
            ["format", "chain", "signature", "online", "bundleId", "appAppleId", "environment"], failed: failedCheck,
            skipped: skipped)
        switch format {
        case .json:
            var object = json(result)
            object["checks"] = checks.json
            console.write(JSONWriter.string(.object(object), pretty: true) + "\n")
        case .text:
            console.write("\(result.status)" + (result.reason.map { " — \($0)" } ?? "") + "\n")
            console.write(checks.text)
            if let type = result.type { console.write("Type: \(type.rawValue)\n") }
            if let payload = result.decodedPayload {
                console.write(JSONWriter.string(.object(payload), pretty: true) + "\n")
            }
        }
        return result.isOK ? 0 : 1
    }

    static func json(_ result: SignedDataResult) -> JSONObject {
        var object = JSONObject()
        object["status"] = .string(result.status.rawValue)
        if let type = result.type { object["type"] = .string(type.rawValue) }
        if let header = result.header { object["header"] = .object(header) }
        if let payload = result.decodedPayload { object["payload"] = .object(payload) }
        if let reason = result.reason { object["reason"] = .string(reason) }
        if !result.nested.isEmpty {
            var nested = JSONObject()
            for key in result.nested.keys.sorted() { nested[key] = .string(result.nested[key]!.status.rawValue) }
            object["nested"] = .object(nested)
        }
        return object
    }

    static func decode(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let format = try ReceiptCommands.outputFormat(arguments)
        let token = try readToken(arguments.positional(0), console: console)
        let jws: CompactJWS
        do {
            jws = try CompactJWS(token)
        } catch {
            throw CommandError.runtime("not a JWS: \(error.reason)")
        }
        let type = SignedDataType.detect(jws.payload).rawValue
        switch format {
        case .json:
            let object: JSONObject = [
                "type": .string(type), "header": .object(jws.header), "payload": .object(jws.payload),
            ]
            console.write(JSONWriter.string(.object(object), pretty: true) + "\n")
        case .text:
            console.write("Type: \(type) (not verified)\n")
            if let alg = jws.header["alg"]?.stringValue { console.write("Algorithm: \(alg)\n") }
            console.write("Certificates in x5c: \(jws.certificateChain?.count ?? 0)\n")
            for member in jws.payload.members {
                var value = JSONWriter.string(member.value)
                if let milliseconds = member.value.int64Value, member.key.hasSuffix("Date") {
                    value += "  (" + ISODates.string(milliseconds: milliseconds) + ")"
                }
                console.write("  \(member.key): \(value)\n")
            }
        }
        return 0
    }

    static func sign(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        guard let keyPath = arguments.value("key") else {
            throw CommandError.usage("Missing expected argument '--key <key.pem>'")
        }
        let certificatePaths = arguments.all("cert")
        guard certificatePaths.count == 3 else {
            throw CommandError.usage("give the chain as three --cert options: leaf, intermediate, root")
        }
        let key = try loadKey(keyPath)
        let chain = try loadCertificates(certificatePaths)
        guard key.isEC, key.bits == 256 else {
            throw CommandError.input(
                "'\(keyPath)' is \(key.isRSA ? "an RSA" : "a \(key.bits)-bit") key; ES256 needs a P-256 (prime256v1) key"
            )
        }
        guard let leafKey = try? chain[0].publicKey, let ownKey = try? key.publicKey,
            leafKey.derEncoded == ownKey.derEncoded
        else {
            throw CommandError.input("the key '\(keyPath)' does not belong to the leaf certificate (the first --cert)")
        }
        let input = try readInput(arguments.positional(0), console: console, limit: CompactJWS.maxSize)
        guard let payload = try? JSONParser.parse(input).objectValue else {
            throw CommandError.runtime("the payload is not a JSON object")
        }
        console.write(try JWSSigner.sign(payload: payload, key: key, chain: chain) + "\n")
        return 0
    }

    static func offer(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        func required(_ name: String) throws -> String {
            guard let value = arguments.value(name) else {
                throw CommandError.usage("Missing expected argument '--\(name)'")
            }
            return value
        }
        let keyPath = try required("key")
        let keyID = try required("key-id")
        let bundleID = try required("bundle-id")
        let productID = try required("product-id")
        let offerID = try required("offer-id")
        let format = arguments.value("format") ?? "v1"
        guard format == "v1" || format == "v2" else {
            throw CommandError.usage("'\(format)' is not a format; use v1 or v2")
        }
        // V1 signs the app account token (empty when none); V2 has no such field.
        var token: UUID?
        if let tokenText = arguments.value("app-account-token") {
            guard format == "v1" else { throw CommandError.usage("--app-account-token is part of V1 signatures only") }
            guard let parsed = UUID(uuidString: tokenText) else {
                throw CommandError.usage("'\(tokenText)' is not a UUID for --app-account-token")
            }
            token = parsed
        }
        var nonce = UUID()
        if let text = arguments.value("nonce") {
            guard let value = UUID(uuidString: text) else {
                throw CommandError.usage("'\(text)' is not a UUID for --nonce")
            }
            nonce = value
        }
        var timestamp = EpochMilliseconds.milliseconds(now)
        if let text = arguments.value("timestamp") {
            guard let value = Int64(text) else {
                throw CommandError.usage("'\(text)' is not milliseconds for --timestamp")
            }
            timestamp = value
        }
        let key = try loadKey(keyPath)
        if format == "v1" {
            let signature = try OfferSignature.promotionalOfferV1(
                bundleID: bundleID, keyID: keyID, productID: productID, offerID: offerID,
                appAccountToken: token?.uuidString ?? "", nonce: nonce, timestamp: timestamp, key: key)
            let object: JSONObject = [
                "keyIdentifier": .string(keyID), "nonce": .string(nonce.uuidString.lowercased()),
                "timestamp": .integer(timestamp), "signature": .string(signature),
            ]
            console.write(JSONWriter.string(.object(object), pretty: true) + "\n")
        } else {
            let jws = try OfferSignature.promotionalOfferV2(
                keyID: keyID, issuerID: arguments.value("issuer-id") ?? "", bundleID: bundleID, productID: productID,
                offerID: offerID, transactionID: arguments.value("transaction-id"), nonce: nonce,
                issuedAt: EpochMilliseconds.date(timestamp) ?? now, key: key)
            console.write(jws + "\n")
        }
        return 0
    }

    static func readToken(_ path: String?, console: Console) throws -> String {
        let bytes = try readInput(path, console: console, limit: CompactJWS.maxSize * 2)
        return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func loadKey(_ path: String) throws -> PrivateKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CommandError.input("cannot read key '\(path)'")
        }
        do {
            return try PrivateKey(pem: String(decoding: data, as: UTF8.self))
        } catch {
            throw CommandError.input("'\(path)' is not a PEM private key")
        }
    }
}

/// OCSP through libcurl: the whole exchange within 30 s, and no more than 1 MiB read (Apple's responders are
/// plain HTTP: anything on the way could trickle or flood an answer).
struct CurlOCSPTransport: OCSPTransport {
    let client = HTTPClient(timeout: .seconds(30), connectTimeout: .seconds(10), maxResponseBytes: 1 << 20)

    func post(_ body: [UInt8], to url: String) async throws(OCSPTransportError) -> [UInt8] {
        guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
            throw OCSPTransportError("responder URL '\(url)' is not HTTP")
        }
        let response: HTTPClient.Response
        do {
            response = try await client.send(
                "POST", url, headers: [("Content-Type", "application/ocsp-request")], body: body)
        } catch {
            throw OCSPTransportError("OCSP responder unreachable: \(error.code)")
        }
        guard response.status == 200 else {
            throw OCSPTransportError("OCSP responder answered HTTP \(response.status)")
        }
        return response.body
    }
}
