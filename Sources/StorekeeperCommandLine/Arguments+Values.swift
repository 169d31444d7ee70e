import AppStoreReceipts
package import Foundation
package import StoreTime
package import StorekeeperCrypto

extension Arguments {
    /// An RFC 3339 date option (`--now`), or nil when absent.
    package func date(_ name: String) throws -> Date? {
        guard let text = value(name) else { return nil }
        guard let date = ReceiptDate.parse(text) else {
            throw CommandError.usage("'\(text)' is not an RFC 3339 date for --\(name)")
        }
        return date
    }

    /// `--seconds` and `--rounds` of the benchmarks (defaults 1 s and 5 rounds), both positive.
    package func benchmarkSettings() throws -> (seconds: Double, rounds: Int) {
        guard let seconds = Double(value("seconds") ?? "1"), let rounds = Int(value("rounds") ?? "5"), seconds > 0,
            rounds > 0
        else { throw CommandError.usage("--seconds and --rounds must be positive numbers") }
        return (seconds, rounds)
    }

    /// `--notification-retention-days` (nil: keep every notification).
    package func notificationRetention() throws -> StorePeriod? {
        try value("notification-retention-days").map { text in
            guard let days = Int(text), (1...3_650).contains(days) else {
                throw CommandError.usage("--notification-retention-days must be 1 to 3650")
            }
            return StorePeriod(days: days)
        }
    }
}

/// Certificates from files (DER, PEM or base64), in order.
package func loadCertificates(_ paths: [String]) throws -> [Certificate] {
    try paths.flatMap { path -> [Certificate] in
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CommandError.input("cannot read certificate '\(path)'")
        }
        do {
            return try Certificate.load(Array(data))
        } catch {
            throw CommandError.input("'\(path)' is not a certificate (DER or PEM)")
        }
    }
}
