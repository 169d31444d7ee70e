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
                    throw EmulatorError.configuration(
                        "the emulator's \(prefix) signing chain in \(directory.path) cannot be read"
                            + (missing.isEmpty ? " (\(error))" : ": \(missing.joined(separator: ", ")) missing")
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

        init(directory: URL, prefix: String) throws {
            func read(_ name: String) throws -> String {
                try String(contentsOf: directory.appendingPathComponent("\(prefix)-\(name)"), encoding: .utf8)
            }
            guard let root = try Certificate.parsePEM(read("root.pem")).first,
                let intermediate = try Certificate.parsePEM(read("intermediate.pem")).first,
                let leaf = try Certificate.parsePEM(read("leaf.pem")).first
            else { throw CryptoError.make(.invalidCertificate, "incomplete \(prefix) chain in \(directory.path)") }
            self.root = root
            self.intermediate = intermediate
            self.leaf = leaf
            self.leafKey = try PrivateKey(pem: read("leaf-key.pem"))
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
