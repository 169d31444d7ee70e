public import Foundation
public import StorekeeperCrypto

/// Certificate chains for tests, from ``SigningChain``: an Apple-like RSA chain valid around a fixed
/// reference time, with switches to break it.
public struct TestPKI: Sendable {
    public let chain: SigningChain
    public var rootKey: PrivateKey { chain.rootKey }
    public var root: Certificate { chain.root }
    public var intermediateKey: PrivateKey { chain.intermediateKey }
    public var intermediate: Certificate { chain.intermediate }
    public var leafKey: PrivateKey { chain.leafKey }
    public var leaf: Certificate { chain.leaf }

    /// The reference time fixtures are built around: 2024-01-01T00:00:00Z.
    public static let referenceDate = Date(timeIntervalSince1970: 1_704_067_200)
    /// Validity of the default leaf: 2023-01-01 … 2026-01-01.
    public static let leafValidity = (
        Date(timeIntervalSince1970: 1_672_531_200), Date(timeIntervalSince1970: 1_767_225_600)
    )
    /// Validity of the CAs: 2020-01-01 … 2040-01-01.
    public static let caValidity = (
        Date(timeIntervalSince1970: 1_577_836_800), Date(timeIntervalSince1970: 2_208_988_800)
    )

    /// One shared chain (RSA key generation is slow; the keys are never secret).
    public static let shared: TestPKI = {
        do {
            return try TestPKI()
        } catch {
            fatalError("cannot build the test PKI: \(error)")
        }
    }()

    public init(
        leafMarker: Bool = true, intermediateMarker: Bool = true, intermediateIsCA: Bool = true,
        keyKind: SigningChain.KeyKind = .rsa2048
    ) throws {
        var options = SigningChain.Options(caValidity: Self.caValidity, leafValidity: Self.leafValidity)
        options.organization = "Storekeeper Tests"
        options.leafMarker = leafMarker
        options.intermediateMarker = intermediateMarker
        options.intermediateIsCA = intermediateIsCA
        options.keyKind = keyKind
        chain = try SigningChain(options)
    }

    /// A self-signed RSA signer like Xcode's `StoreKit` certificate.
    public static func selfSigned(commonName: String = "Storekeeper Test StoreKit") throws -> (PrivateKey, Certificate)
    {
        let signer = try SigningChain.selfSigned(commonName: commonName, validity: caValidity)
        return (signer.key, signer.certificate)
    }
}
