import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreModel
import StoreTime
package import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperJSON

/// `storekeeper bench …`: throughput on one core, printed next to a bare OpenSSL rate from the same run.
package enum BenchCommands {
    /// The benchmarks and the fuzzer, in the order help lists them.
    package static let commands: [Command] = [
        (["bench", "receipt"], receiptSpec, receipt),
        (["bench", "server-api"], serverAPISpec, serverAPI),
        (["bench", "serve"], serveSpec, serve),
        (["bench", "serve-cluster"], clusterSpec, cluster),
        (["bench", "jws"], jwsSpec, jws),
        (["bench", "emulator"], emulatorSpec, emulator),
        (["bench", "http"], httpSpec, http),
        (["bench", "lifecycle"], lifecycleSpec, lifecycle),
        (["bench", "slow-clients"], slowClientsSpec, slowClients),
        (["bench", "hold-connections"], holdSpec, hold),
        (["bench", "dashboard"], dashboardSpec, dashboard),
        (["bench", "retention"], retentionSpec, retention),
        (["bench", "logging"], loggingSpec, logging),
        (["fuzz"], FuzzCommands.spec, FuzzCommands.run),
    ]

    static let receiptSpec = Arguments.Spec(
        command: "storekeeper bench receipt",
        abstract: "Measure full receipt verification on one core against the bare OpenSSL RSA-2048 verify rate.",
        options: [
            .init(name: "seconds", valueName: "s", help: "Time per measurement round (default: 1)."),
            .init(name: "rounds", valueName: "n", help: "Interleaved measurement rounds (default: 5)."),
            .init(
                name: "receipt", valueName: "path",
                help: "Also measure this receipt (needs --root), at its creation date."),
            .init(name: "root", valueName: "cert", help: "Trusted root for --receipt."),
        ],
        discussion: """
            Full verification = parse the PKCS #7 envelope and payload, digest, RSA signature, certificate path \
            (cached by certificate bytes after the first receipt) and field checks. The built-in receipt is \
            signed in this run by a fresh RSA-2048 chain with SHA-256, like Apple's current receipts.
            """)

    static func receipt(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let (seconds, rounds) = try arguments.benchmarkSettings()

        let year: TimeInterval = 365 * 86_400
        let chain = try SigningChain(
            SigningChain.Options(caValidity: (now - year, now + 10 * year), leafValidity: (now - year, now + year)))
        let device: [UInt8] = Array(0..<16)
        let receipt = Receipt.example(creationDate: now, deviceIdentifier: device)
        let bytes = try receipt.signed(by: chain.leaf, key: chain.leafKey, chain: chain.embedded)
        let expectations = ReceiptExpectations(
            bundleID: receipt.bundleID, bundleVersion: receipt.appVersion, deviceIdentifier: device)
        let verifier = ReceiptVerifier(trustedRoots: [chain.root])
        guard verifier.verify(bytes, expecting: expectations, now: now).isValid else {
            throw CommandError.runtime("the benchmark receipt does not verify")
        }

        // Bare OpenSSL: one prepared EVP_PKEY_CTX, RSA-2048 PKCS #1 v1.5 verify of a SHA-256 digest.
        let digest = Digest.sha256(bytes)
        let signature = try chain.leafKey.sign(bytes, algorithm: .rsaPKCS1(.sha256))
        let publicKey = try chain.leaf.publicKey
        let results = interleaved(
            seconds: seconds, rounds: rounds, progress: { progress(console, $0) },
            [
                { count in
                    precondition(
                        OpenSSLBaseline.rsaVerify(
                            key: publicKey, signature: signature, digest: digest, algorithm: .sha256, iterations: count)
                    )
                },
                { count in
                    for _ in 0..<count {
                        precondition(verifier.verify(bytes, expecting: expectations, now: now).isValid)
                    }
                },
                { count in
                    for _ in 0..<count { precondition((try? Receipt(decoding: bytes)) != nil) }
                },
            ])
        let (bare, full, decodeOnly) = (results.best[0], results.best[1], results.best[2])
        console.write(
            """
            Receipt verification, one core (\(rounds) interleaved rounds of \(format(seconds)) s each; best rates, median ratio)
              receipt: \(bytes.count) bytes, \(receipt.inAppPurchases.count) purchases, RSA-2048, SHA-256, chain of 3
              bare OpenSSL RSA-2048 verify      \(rate(bare)) /s
              storekeeper receipt verify        \(rate(full)) /s   ratio \(format(results.medianRatio(1, to: 0))) of bare (target ≥ 0.50)
              of which decoding alone           \(rate(decodeOnly)) /s

            """)
        if let path = arguments.value("receipt") {
            guard let rootPath = arguments.value("root") else { throw CommandError.usage("--receipt needs --root") }
            let root = try Certificate.load(Array(try Data(contentsOf: URL(fileURLWithPath: rootPath))))
            let real = try Receipt.bytes(fromDERorBase64: Array(try Data(contentsOf: URL(fileURLWithPath: path))))
            let decoded = try Receipt(decoding: real)
            let realVerifier = ReceiptVerifier(trustedRoots: root)
            guard realVerifier.verify(real, expecting: ReceiptExpectations(), now: decoded.creationDate).isValid else {
                throw CommandError.runtime("'\(path)' does not verify against '\(rootPath)' at its creation date")
            }
            let measured = interleaved(
                seconds: seconds, rounds: rounds, progress: { progress(console, $0) },
                [
                    { count in
                        for _ in 0..<count {
                            _ = realVerifier.verify(real, expecting: ReceiptExpectations(), now: decoded.creationDate)
                        }
                    }
                ]
            ).best[0]
            console.write(
                "  \(URL(fileURLWithPath: path).lastPathComponent) (\(real.count) bytes, \(decoded.inAppPurchases.count) purchases)  \(rate(measured)) /s\n"
            )
        }
        return 0
    }

    static let jwsSpec = Arguments.Spec(
        command: "storekeeper bench jws",
        abstract:
            "Measure signed-transaction verification on one core against the bare OpenSSL ECDSA P-256 verify rate.",
        options: [
            .init(name: "seconds", valueName: "s", help: "Time per measurement round (default: 1)."),
            .init(name: "rounds", valueName: "n", help: "Interleaved measurement rounds (default: 5)."),
        ],
        discussion: """
            Full verification = split and decode the JWS, parse header and payload JSON, certificate path (cached \
            by certificate bytes after the first token), ES256 signature, bundle and environment checks. The \
            transaction is signed in this run by a fresh P-256 chain shaped like Apple's.
            """)

    static func jws(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let (seconds, rounds) = try arguments.benchmarkSettings()
        let year: TimeInterval = 365 * 86_400
        var options = SigningChain.Options(
            caValidity: (now - year, now + 10 * year), leafValidity: (now - year, now + year))
        options.keyKind = .p256
        let chain = try SigningChain(options)
        let payload: JSONObject = [
            "transactionId": .string("2000000335310644"), "originalTransactionId": .string("2000000335310644"),
            "webOrderLineItemId": .string("2000000032361420"), "bundleId": .string("com.example.storekeeper"),
            "productId": .string("com.example.storekeeper.monthly"), "subscriptionGroupIdentifier": .string("21482456"),
            "purchaseDate": .integer(EpochMilliseconds.milliseconds(now) - 60_000),
            "originalPurchaseDate": .integer(EpochMilliseconds.milliseconds(now) - 60_000),
            "expiresDate": .integer(EpochMilliseconds.milliseconds(now) + 2_592_000_000), "quantity": .integer(1),
            "type": .string("Auto-Renewable Subscription"), "inAppOwnershipType": .string("PURCHASED"),
            "signedDate": .integer(EpochMilliseconds.milliseconds(now)), "environment": .string("Sandbox"),
            "transactionReason": .string("PURCHASE"), "storefront": .string("USA"), "storefrontId": .string("143441"),
            "price": .integer(9990), "currency": .string("USD"),
        ]
        let token = try JWSSigner.sign(
            payload: payload, key: chain.leafKey, chain: [chain.leaf, chain.intermediate, chain.root])
        let verifier = try SignedDataVerifier(
            .init(trustedRoots: [chain.root], bundleID: "com.example.storekeeper", environment: "Sandbox"))
        guard verifier.verify(token, as: .transaction, now: now).isOK else {
            throw CommandError.runtime("the benchmark JWS does not verify")
        }

        let message = Array(token.utf8.prefix(while: { $0 != UInt8(ascii: ".") }))
        let digest = Digest.sha256(message)
        let signature = try chain.leafKey.sign(message, algorithm: .ecdsa(.sha256))
        let publicKey = try chain.leaf.publicKey
        let results = interleaved(
            seconds: seconds, rounds: rounds, progress: { progress(console, $0) },
            [
                { count in
                    precondition(
                        OpenSSLBaseline.ecdsaVerify(
                            key: publicKey, signature: signature, digest: digest, algorithm: .sha256, iterations: count)
                    )
                },
                { count in
                    for _ in 0..<count { precondition(verifier.verify(token, as: .transaction, now: now).isOK) }
                },
            ])
        console.write(
            """
            Signed transaction verification, one core (\(rounds) interleaved rounds of \(format(seconds)) s each; best rates, median ratio)
              JWS: \(token.utf8.count) bytes, ES256, x5c chain of 3
              bare OpenSSL ECDSA P-256 verify   \(rate(results.best[0])) /s
              storekeeper jws verify            \(rate(results.best[1])) /s   ratio \(format(results.medianRatio(1, to: 0))) of bare (target ≥ 0.70)

            """)
        return 0
    }

    /// Rates of several workloads measured in alternation, so that a machine whose speed drifts (a shared
    /// virtual machine, frequency scaling) affects all of them alike.
    struct Rates {
        /// Operations per second of each workload in each round.
        var rounds: [[Double]]
        var best: [Double] { (0..<(rounds.first?.count ?? 0)).map { index in rounds.map { $0[index] }.max() ?? 0 } }

        /// The median over rounds of workload `index`'s rate divided by workload `base`'s in the same round.
        func medianRatio(_ index: Int, to base: Int) -> Double {
            BenchCommands.median(rounds.map { $0[index] / $0[base] }) ?? 0
        }
    }

    /// Runs each batch workload for about `seconds` per round, `rounds` times, in alternation.
    /// `progress` hears of each round as it starts.
    static func interleaved(
        seconds: Double, rounds: Int, progress: (String) -> Void = { _ in }, _ workloads: [(Int) -> Void]
    ) -> Rates {
        let clock = ContinuousClock()
        for workload in workloads { workload(16) }  // warm-up: caches, lazy initialisation
        var result = Rates(rounds: [])
        for round in 0..<rounds {
            progress("round \(round + 1) of \(rounds)…")
            var row: [Double] = []
            for workload in workloads {
                var operations = 0
                var size = 16
                let start = clock.now
                var elapsed = 0.0
                while elapsed < seconds {
                    workload(size)
                    operations += size
                    elapsed = (clock.now - start).seconds
                    if elapsed < seconds / 10 { size *= 2 }
                }
                row.append(Double(operations) / elapsed)
            }
            result.rounds.append(row)
        }
        return result
    }

    static func rate(_ value: Double) -> String {
        let text = String(Int(value.rounded()))
        var grouped = ""
        for (index, character) in text.reversed().enumerated() {
            if index > 0 && index % 3 == 0 { grouped.append(",") }
            grouped.append(character)
        }
        let result = String(grouped.reversed())
        return String(repeating: " ", count: max(0, 9 - result.count)) + result
    }

    static func format(_ value: Double) -> String { String(format: "%.2f", value) }
}
