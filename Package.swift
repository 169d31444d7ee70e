// swift-tools-version: 6.2
import PackageDescription

let upcoming: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    // Lets the hot paths (ASN.1 reading, receipt decoding) specialise and inline across modules.
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)),
]

let package = Package(
    name: "Storekeeper",
    products: [
        .executable(name: "storekeeper", targets: ["storekeeper"]),
        .library(name: "Receipts", targets: ["Receipts"]),
        .library(name: "SignedData", targets: ["SignedData"]),
        .library(name: "Crypto", targets: ["Crypto"]),
    ],
    targets: [
        // C system libraries (Debian packages, found through pkg-config).
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // libmicrohttpd (libmicrohttpd-dev) behind a tiny synchronous C facade; its types stay in server.c.
        .target(name: "CHTTPServer", linkerSettings: [.linkedLibrary("microhttpd")]),

        // Swift wrappers and small hand-written foundations.
        .target(name: "ASN1", swiftSettings: upcoming),
        .target(name: "JSON", swiftSettings: upcoming),
        .target(name: "StoreTime", swiftSettings: upcoming),
        .target(name: "SQLite", dependencies: ["CSQLite"], swiftSettings: upcoming),
        .target(name: "HTTP", dependencies: ["CHTTPServer", "JSON"], swiftSettings: upcoming),
        .target(
            name: "Emulator",
            dependencies: ["Catalog", "Crypto", "HTTP", "JSON", "Receipts", "SignedData", "SQLite", "StoreTime"],
            swiftSettings: upcoming),
        .target(name: "Crypto", dependencies: ["COpenSSL", "ASN1"], swiftSettings: upcoming),

        // Domain.
        .target(name: "Receipts", dependencies: ["ASN1", "Crypto", "JSON"], swiftSettings: upcoming),
        .target(name: "Catalog", dependencies: ["JSON", "StoreTime"], swiftSettings: upcoming),
        .target(name: "SignedData", dependencies: ["Crypto", "JSON"], swiftSettings: upcoming),

        // Command line: a library so it is testable in-process, and a thin executable.
        .target(
            name: "StorekeeperCLI",
            dependencies: [
                "Receipts", "SignedData", "Crypto", "ASN1", "JSON", "Emulator", "Catalog", "HTTP", "StoreTime",
            ],
            swiftSettings: upcoming),
        .executableTarget(name: "storekeeper", dependencies: ["StorekeeperCLI"], swiftSettings: upcoming),

        // Test helpers shared by every test target.
        .target(
            name: "TestSupport", dependencies: ["ASN1", "Crypto", "Receipts", "SignedData", "StorekeeperCLI"],
            swiftSettings: upcoming
        ),

        .testTarget(name: "ASN1Tests", dependencies: ["ASN1", "TestSupport"], swiftSettings: upcoming),
        .testTarget(name: "JSONTests", dependencies: ["JSON", "TestSupport"], swiftSettings: upcoming),
        .testTarget(name: "StoreTimeTests", dependencies: ["StoreTime"], swiftSettings: upcoming),
        .testTarget(name: "SQLiteTests", dependencies: ["SQLite", "TestSupport"], swiftSettings: upcoming),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "JSON", "TestSupport"], swiftSettings: upcoming),
        .testTarget(
            name: "EmulatorTests",
            dependencies: [
                "Emulator", "Catalog", "Crypto", "HTTP", "JSON", "Receipts", "SignedData", "StoreTime", "TestSupport",
            ],
            swiftSettings: upcoming),
        .testTarget(
            name: "CatalogTests", dependencies: ["Catalog", "JSON", "StoreTime", "TestSupport"], swiftSettings: upcoming
        ),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto", "TestSupport"], swiftSettings: upcoming),
        .testTarget(
            name: "ReceiptsTests",
            dependencies: ["Receipts", "Crypto", "ASN1", "JSON", "TestSupport"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "SignedDataTests", dependencies: ["SignedData", "Crypto", "JSON", "TestSupport"],
            swiftSettings: upcoming),
        .testTarget(
            name: "CLITests",
            dependencies: ["StorekeeperCLI", "Receipts", "Crypto", "JSON", "TestSupport"],
            swiftSettings: upcoming
        ),
    ]
)
