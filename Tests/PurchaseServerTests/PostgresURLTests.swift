import StorekeeperPostgres
import Testing

/// A database URL's passwords stay out of what is printed about it: the startup line and libpq's errors.
@Suite("PostgreSQL URLs: passwords never printed")
struct PostgresURLTests {
    @Test("The printed form masks the user's password and the password and sslpassword parameters")
    func redacted() {
        #expect(PostgresDatabase.redacted("postgres://app:pw@db/store") == "postgres://app:***@db/store")
        #expect(PostgresDatabase.redacted("postgres://app@db/store") == "postgres://app@db/store")
        // An `@` in a parameter's value is not the end of the user information.
        let tricky = "postgres://app@db:5432/store?application_name=svc@host&password=hunter2"
        #expect(
            PostgresDatabase.redacted(tricky)
                == "postgres://app@db:5432/store?application_name=svc@host&password=***")
        #expect(
            PostgresDatabase.redacted("postgres://app:pw@db/store?application_name=a@b")
                == "postgres://app:***@db/store?application_name=a@b")
        // A password may hold `?` (libpq reads the user information up to the `@` before the path).
        #expect(PostgresDatabase.redacted("postgres://app:pa?ss@db/store") == "postgres://app:***@db/store")
        #expect(!PostgresDatabase.redacted("postgres://app:pw@db?application_name=a@b").contains("pw"))
        #expect(
            PostgresDatabase.redacted("postgres://app@db/store?password=hunter2&sslmode=require")
                == "postgres://app@db/store?password=***&sslmode=require")
        #expect(
            PostgresDatabase.redacted("postgresql://app:pw@db/store?sslmode=verify-full&SSLPassword=x")
                == "postgresql://app:***@db/store?sslmode=verify-full&SSLPassword=***")
        #expect(PostgresDatabase.redacted("host=db password=x") == "(a libpq connection string)")
    }

    @Test(
        "A URL libpq cannot parse is refused without repeating it or its password",
        arguments: [
            ("postgres://app:50%off@127.0.0.1:1/store", ["50%off"]),
            ("postgres://app:hunter2@[::1/store", ["hunter2"]),
            ("postgres://app@127.0.0.1:1/store?password=%zzsecret", ["%zzsecret", "zzsecret"]),
        ])
    func connectionErrors(url: String, secrets: [String]) {
        do {
            _ = try PostgresConnection(url: url)
            Issue.record("connected with \(url)")
        } catch {
            #expect(error.kind == .connection)
            for secret in secrets { #expect(!error.description.contains(secret), "\(error.description)") }
            #expect(!error.message.isEmpty)
        }
    }
}
