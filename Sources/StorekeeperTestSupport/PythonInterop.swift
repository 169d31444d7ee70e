import Foundation

/// Apple's Python server library in `.build/venv`, prepared by `scripts/python-env`, as an independent
/// verifier. Tests that need it are enabled only when it imports.
public enum PythonInterop {
    /// `STOREKEEPER_PYTHON`, else `<checkout>/.build/venv/bin/python`, when Apple's library imports there.
    public static let python: String? = {
        let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let candidate =
            ProcessInfo.processInfo.environment["STOREKEEPER_PYTHON"]
            ?? checkout.appendingPathComponent(".build/venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: candidate),
            let check = try? ExternalTool.run(candidate, ["-c", "import appstoreserverlibrary, asn1crypto"]),
            check.status == 0
        else { return nil }
        return candidate
    }()

    public static let missingMessage =
        "Apple's app-store-server-library is not installed in .build/venv (scripts/python-env prepares it); interoperability tests skipped"

    /// The script that runs Apple's `SignedDataVerifier` over JSON lines.
    public static var verifierScript: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Tests/Interop/apple_verify.py").path
    }
}
