// swift-tools-version: 6.2
import PackageDescription

let upcoming: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    // Lets the hot paths (ASN.1 reading, receipt decoding) specialise and inline across modules.
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)),
]

// Every module name carries a prefix (Storekeeper…, AppStore…, StoreKit…) or is specific enough (StoreTime,
// StoreModel) that it cannot clash with a target of another package in someone's dependency graph.
let package = Package(
    name: "Storekeeper",
    products: [
        .executable(name: "storekeeper", targets: ["storekeeper"]),
        .library(name: "StoreModel", targets: ["StoreModel"]),
        .library(name: "AppStoreReceipts", targets: ["AppStoreReceipts"]),
        .library(name: "AppStoreSignedData", targets: ["AppStoreSignedData"]),
        .library(name: "StorekeeperCrypto", targets: ["StorekeeperCrypto"]),
        .library(name: "StorekeeperHTTP", targets: ["StorekeeperHTTP"]),
        .library(name: "SubscriptionLifecycle", targets: ["SubscriptionLifecycle"]),
        .library(name: "AppStoreServerAPI", targets: ["AppStoreServerAPI"]),
        .library(name: "AppStoreEmulator", targets: ["AppStoreEmulator"]),
        .library(name: "PurchaseServer", targets: ["PurchaseServer"]),
        .library(name: "StorekeeperWebhooks", targets: ["StorekeeperWebhooks"]),
        .library(name: "StorekeeperClient", targets: ["StorekeeperClient"]),
    ],
    targets: [
        // C system libraries (Debian packages, found through pkg-config).
        .systemLibrary(
            name: "CStorekeeperOpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(name: "CStorekeeperSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // A VFS over SQLite's default one that writes a WAL file's frames in one call a commit; its types stay
        // in vfs.c.
        .target(name: "CStorekeeperSQLiteVFS", linkerSettings: [.linkedLibrary("sqlite3")]),
        .systemLibrary(name: "CStorekeeperPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        // libmicrohttpd (libmicrohttpd-dev) behind a small C facade; its types stay in server.c.
        .target(name: "CStorekeeperHTTPServer", linkerSettings: [.linkedLibrary("microhttpd")]),
        // libcurl (libcurl4-openssl-dev) behind a small synchronous C facade for outbound requests.
        .target(name: "CStorekeeperCurl", linkerSettings: [.linkedLibrary("curl")]),

        // Swift wrappers and small hand-written foundations.
        .target(name: "StorekeeperASN1", swiftSettings: upcoming),
        .target(name: "StorekeeperJSON", swiftSettings: upcoming),
        .target(name: "StorekeeperLogging", dependencies: ["StoreModel", "StoreTime"], swiftSettings: upcoming),
        .target(name: "StoreTime", swiftSettings: upcoming),
        .target(name: "StorekeeperSQL", dependencies: ["StoreTime"], swiftSettings: upcoming),
        .target(
            name: "StorekeeperSQLite", dependencies: ["CStorekeeperSQLite", "CStorekeeperSQLiteVFS", "StorekeeperSQL"],
            swiftSettings: upcoming),
        .target(
            name: "StorekeeperPostgres", dependencies: ["CStorekeeperPostgres", "StorekeeperSQL"],
            swiftSettings: upcoming),
        .target(
            name: "StorekeeperHTTP",
            dependencies: [
                "CStorekeeperHTTPServer", "CStorekeeperCurl", "StorekeeperJSON", "StorekeeperLogging", "StoreTime",
            ],
            swiftSettings: upcoming),
        .target(
            name: "StorekeeperCrypto", dependencies: ["CStorekeeperOpenSSL", "StorekeeperASN1"],
            swiftSettings: upcoming),

        // Domain: one vocabulary, then the formats rendered and verified against it.
        .target(name: "StoreModel", swiftSettings: upcoming),
        // Server-rendered HTML for the dashboards: escaping, the page frame, action buttons, SVG charts.
        .target(
            name: "StorekeeperDashboard", dependencies: ["StorekeeperCrypto", "StorekeeperHTTP"],
            swiftSettings: upcoming),
        .target(
            name: "AppStoreReceipts",
            dependencies: ["StorekeeperASN1", "StorekeeperCrypto", "StorekeeperJSON", "StoreModel"],
            swiftSettings: upcoming),
        .target(
            name: "StoreKitCatalog", dependencies: ["StorekeeperJSON", "StoreTime", "StoreModel"],
            swiftSettings: upcoming),
        .target(
            name: "AppStoreSignedData", dependencies: ["StorekeeperCrypto", "StorekeeperJSON", "StoreModel"],
            swiftSettings: upcoming),

        // Pure engines: state machines with effects out, no clock, storage or I/O.
        .target(name: "SubscriptionLifecycle", dependencies: ["StoreModel", "StoreTime"], swiftSettings: upcoming),

        // The App Store Server API's vocabulary (error codes, bearer tokens, requests and answers) and a
        // client for it, against Apple or the emulator.
        .target(
            name: "AppStoreServerAPI",
            dependencies: [
                "AppStoreSignedData", "StorekeeperCrypto", "StorekeeperHTTP", "StorekeeperJSON", "StoreTime",
            ],
            swiftSettings: upcoming),

        // The emulated App Store: orchestration over storage, with its HTTP API.
        .target(
            name: "AppStoreEmulator",
            dependencies: [
                "SubscriptionLifecycle", "StoreKitCatalog", "StorekeeperCrypto", "StorekeeperHTTP", "StorekeeperJSON",
                "StorekeeperLogging", "AppStoreServerAPI",
                "AppStoreReceipts", "AppStoreSignedData", "StorekeeperSQL", "StorekeeperSQLite", "StoreTime",
                "StoreModel", "StorekeeperDashboard",
            ],
            swiftSettings: upcoming),

        // The purchase server: verified inputs in, subscription state, entitlements and webhooks out.
        .target(
            name: "PurchaseServer",
            dependencies: [
                "AppStoreReceipts", "AppStoreSignedData", "AppStoreServerAPI", "StorekeeperCrypto", "StorekeeperHTTP",
                "StorekeeperJSON", "StorekeeperLogging", "StorekeeperSQL", "StorekeeperSQLite", "StorekeeperPostgres",
                "StoreModel", "StoreTime", "StorekeeperDashboard",
            ],
            resources: [.copy("Resources")],
            swiftSettings: upcoming),

        // Command line: the argument parser, console, errors and signals every command shares; the benchmarks
        // and fuzzers with their bare baselines (the only module besides the wrappers that touches C, to
        // measure it); the commands, a library so it is testable in-process; and a thin executable.
        .target(
            name: "StorekeeperCommandLine",
            dependencies: [
                "AppStoreReceipts", "StorekeeperCrypto", "StorekeeperHTTP", "StorekeeperJSON", "StorekeeperLogging",
                "StoreModel", "StoreTime",
            ],
            swiftSettings: upcoming),
        .target(
            name: "StorekeeperBench",
            dependencies: [
                "CStorekeeperOpenSSL", "CStorekeeperHTTPServer", "StorekeeperCommandLine", "AppStoreReceipts",
                "AppStoreSignedData", "StorekeeperCrypto", "StorekeeperASN1", "StorekeeperJSON", "AppStoreEmulator",
                "StoreKitCatalog", "StorekeeperHTTP", "StorekeeperLogging", "StoreTime", "StoreModel",
                "AppStoreServerAPI", "PurchaseServer", "StorekeeperPostgres", "StorekeeperSQL", "SubscriptionLifecycle",
            ],
            swiftSettings: upcoming),
        // Verifying and decoding the purchase server's webhooks, for Swift backends.
        .target(
            name: "StorekeeperWebhooks", dependencies: ["StorekeeperCrypto", "StorekeeperJSON"],
            swiftSettings: upcoming),
        // An app's client of the purchase server: Foundation only (no C), so it builds for iOS and macOS too.
        .target(name: "StorekeeperClient", swiftSettings: upcoming),
        // The emulator and the purchase server wired for a developer's rehearsal (`storekeeper dev`).
        .target(
            name: "StorekeeperRehearsal",
            dependencies: [
                "AppStoreEmulator", "AppStoreServerAPI", "PurchaseServer", "StoreKitCatalog", "StorekeeperCrypto",
                "StorekeeperHTTP", "StorekeeperJSON", "StorekeeperLogging", "StoreModel", "StoreTime",
            ],
            swiftSettings: upcoming),
        .target(
            name: "StorekeeperCLI",
            dependencies: [
                "StorekeeperCommandLine", "StorekeeperBench", "StorekeeperRehearsal", "AppStoreReceipts",
                "AppStoreSignedData",
                "StorekeeperCrypto", "StorekeeperASN1", "StorekeeperJSON", "AppStoreEmulator", "StoreKitCatalog",
                "StorekeeperHTTP", "StorekeeperLogging", "StoreTime", "StoreModel", "AppStoreServerAPI",
                "PurchaseServer", "StorekeeperPostgres",
            ],
            swiftSettings: upcoming),
        .executableTarget(
            name: "storekeeper", dependencies: ["StorekeeperCLI", "StorekeeperCommandLine"], swiftSettings: upcoming),

        // Test helpers shared by every test target; the command line in-process, for the tests that run it.
        .target(
            name: "StorekeeperTestSupport",
            dependencies: [
                "StorekeeperASN1", "StorekeeperCrypto", "AppStoreReceipts", "AppStoreSignedData", "StorekeeperPostgres",
                "StorekeeperCommandLine", "StorekeeperJSON",
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "StorekeeperCLITestSupport", dependencies: ["StorekeeperCLI", "StorekeeperCommandLine"],
            swiftSettings: upcoming),

        .testTarget(
            name: "StorekeeperASN1Tests", dependencies: ["StorekeeperASN1", "StorekeeperTestSupport"],
            swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperJSONTests", dependencies: ["StorekeeperJSON", "StorekeeperTestSupport"],
            swiftSettings: upcoming),
        .testTarget(name: "StorekeeperLoggingTests", dependencies: ["StorekeeperLogging"], swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperWebhooksTests",
            dependencies: ["StorekeeperWebhooks", "StorekeeperCrypto", "StorekeeperJSON"],
            swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperClientTests",
            dependencies: [
                "StorekeeperClient", "StorekeeperRehearsal", "AppStoreEmulator", "PurchaseServer", "StoreModel",
                "StorekeeperTestSupport",
            ],
            swiftSettings: upcoming),
        .testTarget(name: "StoreTimeTests", dependencies: ["StoreTime"], swiftSettings: upcoming),
        .testTarget(name: "StoreModelTests", dependencies: ["StoreModel"], swiftSettings: upcoming),
        .testTarget(
            name: "SubscriptionLifecycleTests", dependencies: ["SubscriptionLifecycle", "StoreModel", "StoreTime"],
            swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperSQLiteTests",
            dependencies: ["StorekeeperSQL", "StorekeeperSQLite", "StorekeeperTestSupport"],
            swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperHTTPTests",
            dependencies: ["StorekeeperHTTP", "StorekeeperJSON", "StorekeeperLogging", "StorekeeperTestSupport"],
            swiftSettings: upcoming),
        .testTarget(
            name: "AppStoreEmulatorTests",
            dependencies: [
                "AppStoreEmulator", "StoreKitCatalog", "StorekeeperCrypto", "StorekeeperHTTP", "StorekeeperJSON",
                "AppStoreReceipts", "AppStoreSignedData", "StoreTime", "StoreModel", "StorekeeperSQL",
                "StorekeeperSQLite",
                "StorekeeperTestSupport", "AppStoreServerAPI",
            ],
            swiftSettings: upcoming),
        .testTarget(
            name: "PurchaseServerTests",
            dependencies: [
                "PurchaseServer", "AppStoreEmulator", "AppStoreServerAPI", "AppStoreSignedData", "AppStoreReceipts",
                "StoreKitCatalog", "StorekeeperCrypto", "StorekeeperHTTP", "StorekeeperJSON", "StoreModel", "StoreTime",
                "StorekeeperTestSupport", "SubscriptionLifecycle", "StorekeeperPostgres", "StorekeeperCLITestSupport",
                "StorekeeperSQL", "StorekeeperRehearsal", "StorekeeperWebhooks",
            ],
            swiftSettings: upcoming),
        .testTarget(
            name: "StoreKitCatalogTests",
            dependencies: ["StoreKitCatalog", "StorekeeperJSON", "StoreTime", "StoreModel", "StorekeeperTestSupport"],
            swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperCryptoTests", dependencies: ["StorekeeperCrypto", "StorekeeperTestSupport"],
            swiftSettings: upcoming),
        .testTarget(
            name: "AppStoreReceiptsTests",
            dependencies: [
                "AppStoreReceipts", "StorekeeperCrypto", "StorekeeperASN1", "StorekeeperJSON", "StoreModel",
                "StorekeeperTestSupport",
            ],
            swiftSettings: upcoming),
        .testTarget(
            name: "AppStoreSignedDataTests",
            dependencies: [
                "AppStoreSignedData", "StorekeeperCrypto", "StorekeeperJSON", "StoreModel", "StorekeeperTestSupport",
                "AppStoreServerAPI", "StorekeeperHTTP",
            ],
            swiftSettings: upcoming),
        .testTarget(
            name: "StorekeeperCLITests",
            dependencies: [
                "StorekeeperCLI", "AppStoreReceipts", "StorekeeperCrypto", "StorekeeperJSON", "StorekeeperHTTP",
                "StorekeeperTestSupport", "AppStoreEmulator", "AppStoreSignedData", "StorekeeperCLITestSupport",
                "StorekeeperCommandLine",
            ],
            swiftSettings: upcoming),
    ]
)
