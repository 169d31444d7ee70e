import AppStoreReceipts
import Foundation
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperJSON

/// `storekeeper receipt verify | decode | sample`.
enum ReceiptCommands {
    static let inputHelp = "A receipt file (DER or base64 text), or - for standard input (the default)."

    static let verifySpec = Arguments.Spec(
        command: "storekeeper receipt verify", abstract: "Verify an App Store receipt.",
        positionals: [("path", inputHelp)],
        options: [
            .init(
                name: "root", valueName: "cert", help: "A trusted root certificate, DER or PEM.", repeatable: true,
                required: true),
            .init(name: "bundle-id", valueName: "id", help: "The app's bundle identifier (compared byte for byte)."),
            .init(name: "bundle-version", valueName: "version", help: "The app version the receipt must carry."),
            .init(
                name: "device-id", valueName: "uuid-or-hex",
                help: "identifierForVendor UUID, or hex bytes (a Mac's MAC address)."),
            .init(name: "now", valueName: "rfc3339", help: "The current time for the expiry check (default: now)."),
            .init(name: "format", valueName: "json|text", help: "Output format (default: json)."),
        ],
        discussion: """
            Checks, in order: the signature over the payload; the chain from the signer to a --root, every \
            certificate valid at the receipt's creation date; the bundle id and version; the device hash; the \
            Volume Purchase Program expiry. Exit status 0 when valid, 1 when not.
            Reason codes: malformed, signature_invalid, untrusted_chain, certificate_not_valid_at_date,
            bundle_id_mismatch, bundle_version_mismatch, device_hash_mismatch, receipt_expired.
            """)

    static let decodeSpec = Arguments.Spec(
        command: "storekeeper receipt decode", abstract: "Decode an App Store receipt without verifying it.",
        positionals: [("path", inputHelp)],
        options: [.init(name: "format", valueName: "json|text", help: "Output format (default: json).")])

    static let sampleSpec = Arguments.Spec(
        command: "storekeeper receipt sample",
        abstract: "Write a sample receipt signed by a freshly generated chain, and the root that verifies it.",
        options: [
            .init(
                name: "out", valueName: "dir",
                help: "Directory to write receipt.der, receipt.b64, root.pem and device-id.txt.", required: true)
        ])

    /// Receipts larger than this (as base64 text) are refused before parsing.
    static let inputLimit = ReceiptLimits.default.maxSize * 2

    static func verify(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let format = try outputFormat(arguments)
        var expectations = ReceiptExpectations(
            bundleID: arguments.value("bundle-id"), bundleVersion: arguments.value("bundle-version"))
        if let device = arguments.value("device-id") {
            guard let bytes = DeviceIdentifier.parse(device) else {
                throw CommandError.usage("'\(device)' is not a UUID or hex bytes for --device-id")
            }
            expectations.deviceIdentifier = bytes
        }
        let current = try arguments.date("now") ?? now
        let roots = try loadCertificates(arguments.all("root"))
        let input = try readInput(arguments.positional(0), console: console, limit: inputLimit)
        let result: ReceiptVerificationResult
        do {
            let bytes = try Receipt.bytes(fromDERorBase64: input)
            result = ReceiptVerifier(trustedRoots: roots).verify(bytes, expecting: expectations, now: current)
        } catch let error as ReceiptError {
            result = .invalid(ReceiptVerificationFailure(code: .malformed, message: error.reason, receipt: nil))
        }
        let failedCheck: String? =
            switch result.failure?.code {
            case nil: nil
            case .malformed?: "format"
            case .signatureInvalid?: "signature"
            case .untrustedChain?, .certificateNotValidAtDate?: "chain"
            case .bundleIDMismatch?: "bundleId"
            case .bundleVersionMismatch?: "bundleVersion"
            case .deviceHashMismatch?: "deviceHash"
            default: "expiry"
            }
        var skipped: [String: String] = [:]
        if expectations.bundleID == nil { skipped["bundleId"] = "no --bundle-id given" }
        if expectations.bundleVersion == nil { skipped["bundleVersion"] = "no --bundle-version given" }
        if expectations.deviceIdentifier == nil { skipped["deviceHash"] = "no --device-id given" }
        if result.receipt != nil, result.receipt?.expirationDate == nil, failedCheck != "format" {
            skipped["expiry"] = "the receipt has no expiration date (not a VPP receipt)"
        }
        let checks = CheckReport(
            ["format", "signature", "chain", "bundleId", "bundleVersion", "deviceHash", "expiry"], failed: failedCheck,
            skipped: skipped)
        switch format {
        case .json:
            var object = JSONObject()
            object["valid"] = .bool(result.isValid)
            object["checks"] = checks.json
            if let failure = result.failure {
                object["error"] = .object(["code": .string(failure.code.rawValue), "message": .string(failure.message)])
            }
            if let receipt = result.receipt {
                object["environment"] = .string(receipt.environment)
                object["receipt"] = .object(receipt.verifyReceiptJSON(requestDate: current))
            }
            console.write(JSONWriter.string(.object(object), pretty: true) + "\n")
        case .text:
            if let failure = result.failure {
                console.write("INVALID: \(failure.code) — \(failure.message)\n")
            } else {
                console.write("VALID\n")
            }
            console.write(checks.text)
            if let receipt = result.receipt { console.write(TextReport.receipt(receipt)) }
        }
        return result.isValid ? 0 : 1
    }

    static func decode(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let format = try outputFormat(arguments)
        let input = try readInput(arguments.positional(0), console: console, limit: inputLimit)
        let receipt: Receipt
        do {
            receipt = try Receipt(decoding: Receipt.bytes(fromDERorBase64: input))
        } catch let error as ReceiptError {
            throw CommandError.runtime("not a receipt: \(error.reason)")
        }
        switch format {
        case .json:
            var object = JSONObject()
            object["environment"] = .string(receipt.environment)
            object["receipt"] = .object(receipt.verifyReceiptJSON(requestDate: now))
            console.write(JSONWriter.string(.object(object), pretty: true) + "\n")
        case .text:
            console.write(TextReport.receipt(receipt))
        }
        return 0
    }

    static func sample(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let out = arguments.value("out")!
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))  // receipts carry whole seconds
        let directory = URL(fileURLWithPath: out)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let year: TimeInterval = 365 * 86_400
        var options = SigningChain.Options(
            caValidity: (now.addingTimeInterval(-year), now.addingTimeInterval(20 * year)),
            leafValidity: (now.addingTimeInterval(-year), now.addingTimeInterval(2 * year)))
        options.organization = "Storekeeper Sample"
        let chain = try SigningChain(options)
        let device = UUID()
        let deviceBytes = DeviceIdentifier.bytes(of: device)
        let receipt = Receipt.example(creationDate: now, deviceIdentifier: deviceBytes)
        let der = try receipt.signed(by: chain.leaf, key: chain.leafKey, chain: chain.embedded)
        try Data(der).write(to: directory.appendingPathComponent("receipt.der"))
        try Data(Data(der).base64EncodedString().utf8).write(to: directory.appendingPathComponent("receipt.b64"))
        try Data(chain.root.pemEncoded.utf8).write(to: directory.appendingPathComponent("root.pem"))
        try Data((device.uuidString + "\n").utf8).write(to: directory.appendingPathComponent("device-id.txt"))
        console.write(
            """
            Wrote a sample receipt for \(receipt.bundleID) to \(directory.path):
              receipt.der, receipt.b64   the receipt (\(der.count) bytes, \(receipt.inAppPurchases.count) purchases)
              root.pem                   the root certificate that verifies it
              device-id.txt              the device identifier its hash was made for (\(device.uuidString))
            Verify it with:
              storekeeper receipt verify \(directory.path)/receipt.der --root \(directory.path)/root.pem --bundle-id \(receipt.bundleID) --device-id \(device.uuidString)

            """)
        return 0
    }

    enum Format { case json, text }

    static func outputFormat(_ arguments: Arguments) throws -> Format {
        switch arguments.value("format") ?? "json" {
        case "json": return .json
        case "text": return .text
        case let other: throw CommandError.usage("'\(other)' is not a format; use json or text")
        }
    }
}

/// `--device-id` values: a UUID (its 16 bytes) or hex bytes, optionally separated by `:` or `-`.
enum DeviceIdentifier {
    static func parse(_ text: String) -> [UInt8]? {
        if let uuid = UUID(uuidString: text) { return bytes(of: uuid) }
        let digits = text.filter { $0 != ":" && $0 != "-" && $0 != " " }
        // ASCII only: `isHexDigit` also takes full-width digits, which `UInt8(_:radix:)` does not.
        guard !digits.isEmpty, digits.count % 2 == 0, digits.allSatisfy({ $0.isASCII && $0.isHexDigit }) else {
            return nil
        }
        var result: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            result.append(UInt8(digits[index..<next], radix: 16)!)
            index = next
        }
        return result
    }

    static func bytes(of uuid: UUID) -> [UInt8] {
        withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }
}

/// Human-readable receipt summaries for `--format text`.
enum TextReport {
    static func receipt(_ receipt: Receipt) -> String {
        var lines = [
            "Environment:      \(receipt.environment) (\(receipt.receiptType))",
            "Bundle id:        \(receipt.bundleID)",
            "App version:      \(receipt.appVersion)"
                + (receipt.originalAppVersion.map { " (originally \($0))" } ?? ""),
            "Created:          \(ReceiptDate.rfc3339String(receipt.creationDate))",
        ]
        if let expiry = receipt.expirationDate {
            lines.append("Expires:          \(ReceiptDate.rfc3339String(expiry))")
        }
        lines.append("Purchases:        \(receipt.inAppPurchases.count)")
        // The receipt's SET OF order is its DER encoding's; people read purchases by date, then by id.
        let ordered = receipt.inAppPurchases.sorted { a, b in
            if a.purchaseDate != b.purchaseDate { return a.purchaseDate < b.purchaseDate }
            if a.transactionID.count != b.transactionID.count { return a.transactionID.count < b.transactionID.count }
            return a.transactionID < b.transactionID
        }
        for (index, purchase) in ordered.enumerated() {
            var line =
                "  \(index + 1). \(purchase.productID) ×\(purchase.quantity)  transaction \(purchase.transactionID)"
            if let original = purchase.originalTransactionID, original != purchase.transactionID {
                line += " (original \(original))"
            }
            line += "  purchased \(ReceiptDate.rfc3339String(purchase.purchaseDate))"
            if let expires = purchase.expiresDate { line += "  expires \(ReceiptDate.rfc3339String(expires))" }
            if let cancelled = purchase.cancellationDate {
                line += "  CANCELLED \(ReceiptDate.rfc3339String(cancelled))"
            }
            lines.append(line)
        }
        if !receipt.unknownAttributes.isEmpty {
            lines.append(
                "Unnamed attributes: " + receipt.unknownAttributes.map { String($0.type) }.joined(separator: ", "))
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
