import AppStoreReceipts
import Foundation
import StorekeeperCrypto

extension Arguments {
    /// An RFC 3339 date option (`--now`), or nil when absent.
    func date(_ name: String) throws -> Date? {
        guard let text = value(name) else { return nil }
        guard let date = ReceiptDate.parse(text) else {
            throw UsageError("'\(text)' is not an RFC 3339 date for --\(name)")
        }
        return date
    }

    /// `--seconds` and `--rounds` of the benchmarks (defaults 1 s and 5 rounds), both positive.
    func benchmarkSettings() throws -> (seconds: Double, rounds: Int) {
        guard let seconds = Double(value("seconds") ?? "1"), let rounds = Int(value("rounds") ?? "5"), seconds > 0,
            rounds > 0
        else { throw UsageError("--seconds and --rounds must be positive numbers") }
        return (seconds, rounds)
    }
}

/// Certificates from files (DER, PEM or base64), in order.
func loadCertificates(_ paths: [String]) throws -> [Certificate] {
    try paths.flatMap { path -> [Certificate] in
        guard let data = FileManager.default.contents(atPath: path) else {
            throw InputError("cannot read certificate '\(path)'")
        }
        do {
            return try Certificate.load(Array(data))
        } catch {
            throw InputError("'\(path)' is not a certificate (DER or PEM)")
        }
    }
}
