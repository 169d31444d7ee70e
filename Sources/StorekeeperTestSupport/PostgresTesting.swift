import Foundation
import StorekeeperPostgres
public import Testing

/// The throw-away PostgreSQL that `scripts/test` starts (`scripts/test-postgres`), named by
/// `STOREKEEPER_TEST_POSTGRES_URL`; each test gets a database of its own.
public enum PostgresTesting {
    public static let url = ProcessInfo.processInfo.environment["STOREKEEPER_TEST_POSTGRES_URL"].flatMap {
        $0.isEmpty ? nil : $0
    }

    public static let skipMessage: Comment =
        "no PostgreSQL: scripts/test starts one (scripts/test-postgres), or set STOREKEEPER_TEST_POSTGRES_URL"

    /// A new, empty database on the test server; answers its URL.
    public static func freshDatabase() throws -> String {
        guard let url else { throw PostgresError(.connection, "STOREKEEPER_TEST_POSTGRES_URL is not set") }
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
        let admin = try PostgresConnection(url: url)
        try admin.executeScript("CREATE DATABASE \(name)")
        guard let slash = url.lastIndex(of: "/") else { return url }
        return String(url[..<slash]) + "/" + name
    }
}
