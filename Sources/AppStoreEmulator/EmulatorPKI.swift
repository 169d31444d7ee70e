public import Foundation
public import StorekeeperCrypto

/// The emulator's own certificate chains, created on first start and kept in the data directory: RSA for
/// receipts and P-256 for signed data, each root → intermediate (WWDR marker) → leaf (receipt-signing
/// marker), strict enough (key identifiers, basic constraints, key usage) for Apple's libraries.
public struct EmulatorPKI: Sendable {
    public let receipts: SigningChain.Loaded
    public let signedData: SigningChain.Loaded

    /// Loads the chains from `directory`, creating and saving them when absent. Key files are written 0600.
    public static func loadOrCreate(in directory: URL) throws -> EmulatorPKI {
        try PrivateFiles.directory(directory, narrowExisting: true)
        // 2020-01-01 to 2050-01-01: store time may be advanced by years.
        let validity = (Date(timeIntervalSince1970: 1_577_836_800), Date(timeIntervalSince1970: 2_524_608_000))
        func chain(_ prefix: String, _ kind: SigningChain.KeyKind, _ leafName: String) throws -> SigningChain.Loaded {
            let names = ["root.pem", "intermediate.pem", "leaf.pem", "leaf-key.pem"].map { "\(prefix)-\($0)" }
            let present = names.filter {
                FileManager.default.fileExists(atPath: directory.appendingPathComponent($0).path)
            }
            if !present.isEmpty {
                // A chain that exists is never replaced: receipts it signed would stop verifying.
                do { return try SigningChain.Loaded(directory: directory, prefix: prefix) } catch {
                    let missing = names.filter { !present.contains($0) }
                    let reason = (error as? CryptoError)?.reason ?? String(describing: error)
                    throw EmulatorError.configuration(
                        "the emulator's \(prefix) signing chain in \(directory.path) cannot be read"
                            + (missing.isEmpty ? ": \(reason)" : ": \(missing.joined(separator: ", ")) missing")
                            + "; restore the files or start with an empty data directory")
                }
            }
            var options = SigningChain.Options(caValidity: validity, leafValidity: validity)
            options.keyKind = kind
            options.organization = "Storekeeper App Store Emulator"
            options.rootName = "Storekeeper Emulator Root CA (\(prefix))"
            options.intermediateName = "Storekeeper Emulator Worldwide Developer Relations (\(prefix))"
            options.leafName = leafName
            let created = try SigningChain(options)
            try created.save(directory: directory, prefix: prefix)
            return try SigningChain.Loaded(directory: directory, prefix: prefix)
        }
        return EmulatorPKI(
            receipts: try chain("receipt", .rsa2048, "Storekeeper Emulator Receipt Signing"),
            signedData: try chain("jws", .p256, "Storekeeper Emulator ECC Receipt Signing"))
    }
}

extension SigningChain {
    /// A chain read back from files: the three certificates and the leaf's key.
    public struct Loaded: Sendable {
        public let root: Certificate
        public let intermediate: Certificate
        public let leaf: Certificate
        public let leafKey: PrivateKey

        /// A file that cannot be read or parsed is named in the error (its path, never its contents).
        init(directory: URL, prefix: String) throws {
            func load<Value>(_ name: String, _ parse: (String) throws -> Value?) throws -> Value {
                let path = directory.appendingPathComponent("\(prefix)-\(name)").path
                let text: String
                do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
                    throw CryptoError.make(.invalidInput, "cannot read \(path)")
                }
                let parsed: Value?
                do { parsed = try parse(text) } catch {
                    throw CryptoError.make(
                        name.hasSuffix("key.pem") ? .invalidKey : .invalidCertificate, "\(path) is damaged")
                }
                guard let parsed else { throw CryptoError.make(.invalidCertificate, "\(path) holds no certificate") }
                return parsed
            }
            root = try load("root.pem") { try Certificate.parsePEM($0).first }
            intermediate = try load("intermediate.pem") { try Certificate.parsePEM($0).first }
            leaf = try load("leaf.pem") { try Certificate.parsePEM($0).first }
            leafKey = try load("leaf-key.pem") { try PrivateKey(pem: $0) }
        }
    }

    /// Writes the certificates (PEM) and the leaf's key (PKCS #8 PEM, mode 0600) under `prefix-…`.
    func save(directory: URL, prefix: String) throws {
        for (name, certificate) in [("root.pem", root), ("intermediate.pem", intermediate), ("leaf.pem", leaf)] {
            try Data(certificate.pemEncoded.utf8).write(to: directory.appendingPathComponent("\(prefix)-\(name)"))
        }
        let keyPath = directory.appendingPathComponent("\(prefix)-leaf-key.pem").path
        try PrivateFiles.create(keyPath, contents: Array(try leafKey.pemPKCS8().utf8))
    }
}
