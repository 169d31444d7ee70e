import AppStoreEmulator
import AppStoreReceipts
import AppStoreSignedData
import Foundation
import StoreKitCatalog
import StoreModel
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging

#if canImport(Glibc)
    import Glibc
#endif

/// `storekeeper fuzz`: a standing hostile-input suite. Each target mutates a seed corpus built in this run
/// (a signed receipt, its payload, a signed JWS, request bodies, a `.storekit` catalogue, raw HTTP
/// requests) and feeds every input to its parser. A crash ends the process (non-zero status); an input that
/// takes longer than the hang limit, or a changed input that verifies as if it were the original, is a
/// failure (exit 1).
enum FuzzCommands {
    static let spec = Arguments.Spec(
        command: "storekeeper fuzz",
        abstract: "Feed mutated receipts, JWS, JSON, .storekit files and HTTP requests to their parsers.",
        options: [
            .init(
                name: "target", valueName: "name",
                help: "receipt-envelope, receipt-payload, jws, json, storekit or http (default: all).", repeatable: true
            ),
            .init(name: "seconds", valueName: "s", help: "Time per target (default: 2; a long run: 60)."),
            .init(name: "seed", valueName: "n", help: "Random seed (default: 1); the same seed gives the same inputs."),
        ],
        discussion: """
            Mutations: bit flips, boundary bytes (tags, lengths, quotes, dots), insertions, deletions, \
            duplicated and spliced runs, truncation. Prints inputs tried per target and in total.
            """)

    static let allTargets = ["receipt-envelope", "receipt-payload", "jws", "json", "storekit", "http"]
    /// An input slower than this is reported as a hang.
    static let hangLimit: Duration = .seconds(2)

    struct Outcome {
        var inputs = 0
        var failures: [String] = []
        var slowest: Duration = .zero
        var accepted = 0
    }

    static func run(_ arguments: Arguments, console: Console, now: Date) async throws -> Int32 {
        let seconds = Double(arguments.value("seconds") ?? "2") ?? 0
        guard seconds > 0, seconds <= 3600 else {
            throw CommandError.usage("--seconds must be more than 0 and at most 3600")
        }
        guard let seed = UInt64(arguments.value("seed") ?? "1") else {
            throw CommandError.usage("--seed must be a number")
        }
        let targets = arguments.all("target").isEmpty ? allTargets : arguments.all("target")
        for target in targets where !allTargets.contains(target) {
            throw CommandError.usage("'\(target)' is not a fuzz target (\(allTargets.joined(separator: ", ")))")
        }
        var total = 0
        var failed = false
        for target in targets {
            BenchCommands.progress(console, "fuzzing \(target) for \(seconds) s…")
            var mutator = Mutator(seed: seed &+ target.utf8.reduce(UInt64(0)) { $0 &* 31 &+ UInt64($1) })
            let outcome = try await fuzz(target, seconds: seconds, mutator: &mutator, now: now)
            total += outcome.inputs
            let slowest = outcome.slowest.milliseconds
            console.write(
                "fuzz \(target): \(outcome.inputs) inputs, \(outcome.accepted) accepted as valid, slowest "
                    + String(format: "%.1f ms", slowest) + ", \(outcome.failures.count) failures\n")
            for failure in outcome.failures.prefix(5) { console.writeError("  \(failure)\n") }
            failed = failed || !outcome.failures.isEmpty
        }
        console.write("fuzz: \(total) inputs in all, \(failed ? "FAILED" : "no crash, hang or accepted variant")\n")
        return failed ? 1 : 0
    }

    static func fuzz(_ target: String, seconds: Double, mutator: inout Mutator, now: Date) async throws -> Outcome {
        switch target {
        case "receipt-envelope", "receipt-payload":
            let chain = try SigningChain(
                SigningChain.Options(
                    caValidity: (now - 86_400, now + 86_400), leafValidity: (now - 86_400, now + 86_400)))
            let receipt = Receipt.example(creationDate: now, deviceIdentifier: Array(0..<16))
            let signed = try receipt.signed(by: chain.leaf, key: chain.leafKey, chain: chain.embedded)
            let verifier = ReceiptVerifier(trustedRoots: [chain.root])
            guard let original = verifier.verify(signed, expecting: .init(), now: now).receipt else {
                throw CommandError.runtime("the seed receipt does not verify")
            }
            if target == "receipt-payload" {
                let payload = receipt.payloadDER()
                return loop(seconds: seconds, seeds: [payload], mutator: &mutator) { input, outcome in
                    if (try? Receipt(payload: input)) != nil { outcome.accepted += 1 }
                }
            }
            return loop(seconds: seconds, seeds: [signed], mutator: &mutator) { input, outcome in
                if case .valid(let decoded) = verifier.verify(input, expecting: .init(), now: now) {
                    outcome.accepted += 1
                    if decoded != original {
                        outcome.failures.append("a changed receipt verified with other content: \(hex(input))")
                    }
                }
            }
        case "jws":
            var options = SigningChain.Options(
                caValidity: (now - 86_400, now + 86_400), leafValidity: (now - 86_400, now + 86_400))
            options.keyKind = .p256
            let chain = try SigningChain(options)
            let payload: JSONObject = [
                "transactionId": .string("1"), "originalTransactionId": .string("1"),
                "bundleId": .string("com.example"),
                "productId": .string("p"), "type": .string("Consumable"), "environment": .string("Sandbox"),
                "signedDate": .integer(EpochMilliseconds.milliseconds(now)), "quantity": .integer(1),
            ]
            let token = try JWSSigner.sign(
                payload: payload, key: chain.leafKey, chain: [chain.leaf, chain.intermediate, chain.root])
            let verifier = try SignedDataVerifier(.init(trustedRoots: [chain.root], bundleID: "com.example"))
            return loop(seconds: seconds, seeds: [Array(token.utf8)], mutator: &mutator) { input, outcome in
                let text = String(decoding: input, as: UTF8.self)
                if verifier.verify(text, now: now).isOK {
                    outcome.accepted += 1
                    if input != Array(token.utf8) {
                        outcome.failures.append("a changed JWS verified: \(String(text.prefix(120)))")
                    }
                }
            }
        case "json":
            let seeds = [
                #"{"productId":"com.example.storekeeper.coins","quantity":2,"appAccountToken":"7E3B1C1A-0000-4000-8000-000000000001"}"#,
                #"{"receipt-data":"MIIT","password":"s3cret","exclude-old-transactions":true}"#,
                #"{"advance":"P1M","rate":"realTime","nested":[1,2.5e3,-0,null,false,{"a":"\u00e9\n"}]}"#,
                #"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{"deep":true}]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"#,
            ].map { Array($0.utf8) }
            return loop(seconds: seconds, seeds: seeds, mutator: &mutator) { input, outcome in
                if (try? JSONParser.parse(input)) != nil { outcome.accepted += 1 }
            }
        case "storekit":
            return loop(seconds: seconds, seeds: [Array(DefaultCatalog.storekit.utf8)], mutator: &mutator) {
                input, outcome in
                if (try? StoreKitConfiguration(data: input)) != nil { outcome.accepted += 1 }
            }
        case "http":
            return try await fuzzHTTP(seconds: seconds, mutator: &mutator)
        default:
            throw CommandError.usage("'\(target)' is not a fuzz target")
        }
    }

    /// Runs `body` on mutations of the seeds for about `seconds`, timing each input.
    static func loop(
        seconds: Double, seeds: [[UInt8]], mutator: inout Mutator, _ body: ([UInt8], inout Outcome) -> Void
    ) -> Outcome {
        var outcome = Outcome()
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int(seconds * 1000))
        for seed in seeds { body(seed, &outcome) }
        outcome.accepted = 0
        while clock.now < deadline {
            for _ in 0..<64 {
                let input = mutator.mutate(seeds[mutator.below(seeds.count)], others: seeds)
                let started = clock.now
                body(input, &outcome)
                let elapsed = clock.now - started
                outcome.slowest = max(outcome.slowest, elapsed)
                if elapsed > hangLimit { outcome.failures.append("input took \(elapsed): \(hex(input))") }
                if ProcessInfo.processInfo.environment["FUZZ_TRACE_SLOW"] != nil, elapsed > .milliseconds(50) {
                    FileHandle.standardError.write(Data("slow \(elapsed) \(input.count) bytes: \(hex(input))\n".utf8))
                }
                outcome.inputs += 1
            }
        }
        return outcome
    }

    /// Raw, mutated HTTP requests to an emulator on 127.0.0.1: every one is answered or closed within the
    /// deadline, and the server keeps answering a well-formed request throughout.
    static func fuzzHTTP(seconds: Double, mutator: inout Mutator) async throws -> Outcome {
        let directory = try ScratchDirectory.make("storekeeper-bench")
        defer { try? FileManager.default.removeItem(at: directory) }
        let catalog = try StoreKitConfiguration(data: Array(DefaultCatalog.storekit.utf8))
        let store = try await AppStore(
            catalog: [catalog], apps: [AppConfiguration(bundleID: DefaultCatalog.bundleID)],
            dataDirectory: directory,
            rate: .realTime)
        var limits = HTTPLimits()
        limits.requestTimeout = .seconds(2)
        limits.idleTimeout = 1
        let server = try HTTPServer(port: 0, limits: limits, responder: EmulatorRoutes(store).responder())
        defer { server.stop() }
        let body = #"{"environment":"Sandbox","storefront":"USA"}"#
        let seeds = [
            "GET /_emulator/v1/clock HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            "POST /_emulator/v1/accounts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)",
            "POST /sandbox/verifyReceipt?x=1&x=%26 HTTP/1.1\r\nHost: sandbox.itunes.apple.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n",
        ].map { Array($0.utf8) }
        let health = Array("GET /_emulator/v1/clock HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
        var outcome = Outcome()
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int(seconds * 1000))
        while clock.now < deadline {
            // A batch in flight at once: a request the server must time out costs its idle timeout, not ours.
            let batch = (0..<128).map { _ in mutator.mutate(seeds[mutator.below(seeds.count)], others: seeds) }
            let started = clock.now
            let answers = exchangeAll(port: server.port, batch, timeoutSeconds: 5)
            outcome.slowest = max(outcome.slowest, clock.now - started)
            for (input, answer) in zip(batch, answers) {
                if answer == nil { outcome.failures.append("no answer or close within 5 s: \(hex(input))") }
                if answer?.hasPrefix("HTTP/1.1 2") == true { outcome.accepted += 1 }
            }
            outcome.inputs += batch.count
            guard exchangeAll(port: server.port, [health], timeoutSeconds: 5)[0]?.hasPrefix("HTTP/1.1 200") == true
            else {
                outcome.failures.append("the server stopped answering a well-formed request")
                break
            }
        }
        return outcome
    }

    /// Sends each input on its own connection, half-closes, and reads every connection until the server
    /// closes it; nil for a connection still open after `timeoutSeconds`.
    static func exchangeAll(port: Int, _ inputs: [[UInt8]], timeoutSeconds: Int) -> [String?] {
        var sockets: [Int32] = []
        for input in inputs {
            let descriptor = connectLoopback(port: port)
            if descriptor >= 0 {
                _ = input.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                shutdown(descriptor, Int32(SHUT_WR))
            }
            sockets.append(descriptor)
        }
        defer { for descriptor in sockets where descriptor >= 0 { close(descriptor) } }
        var received = [[UInt8]](repeating: [], count: inputs.count)
        var done = sockets.map { $0 < 0 }
        var answers = [String?](repeating: nil, count: inputs.count)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(timeoutSeconds)
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while done.contains(false), clock.now < deadline {
            var polled = sockets.indices.filter { !done[$0] }.map {
                pollfd(fd: sockets[$0], events: Int16(POLLIN), revents: 0)
            }
            guard poll(&polled, nfds_t(polled.count), 100) >= 0 else { break }
            for entry in polled where entry.revents != 0 {
                guard let index = sockets.firstIndex(of: entry.fd) else { continue }
                let count = buffer.withUnsafeMutableBytes { recv(entry.fd, $0.baseAddress, $0.count, 0) }
                if count > 0, received[index].count < 1 << 20 {
                    received[index] += buffer[0..<count]
                } else {
                    done[index] = true
                    answers[index] = String(decoding: received[index], as: UTF8.self)
                }
            }
        }
        return answers
    }

    static func connectLoopback(port: Int) -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return -1 }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(descriptor)
            return -1
        }
        return descriptor
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.prefix(48).map { String(format: "%02x", $0) }.joined()
            + (bytes.count > 48 ? "… (\(bytes.count) bytes)" : "")
    }
}

/// Deterministic mutations (SplitMix64).
struct Mutator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int { bound <= 1 ? 0 : Int(next() % UInt64(bound)) }

    static let interesting: [UInt8] = [
        0x00, 0x01, 0x7f, 0x80, 0x81, 0x82, 0x84, 0xff, 0x30, 0x31, 0x02, 0x04, 0x06, 0x0c, 0x16, 0x24, 0xa0, 0x22,
        0x2e, 0x3d, 0x5b, 0x7b, 0x5c, 0x0a, 0x0d, 0x20, 0x3a, 0x25,
    ]

    /// One to four stacked mutations of `input`.
    mutating func mutate(_ input: [UInt8], others: [[UInt8]]) -> [UInt8] {
        var bytes = input
        for _ in 0...below(4) {
            guard !bytes.isEmpty else {
                bytes = [Self.interesting[below(Self.interesting.count)]]
                continue
            }
            let index = below(bytes.count)
            switch below(9) {
            case 0, 1: bytes[index] ^= UInt8(1) << UInt8(below(8))
            case 2: bytes[index] = Self.interesting[below(Self.interesting.count)]
            case 3: bytes[index] = UInt8(truncatingIfNeeded: next())
            case 4: bytes.insert(contentsOf: (0...below(8)).map { _ in UInt8(truncatingIfNeeded: next()) }, at: index)
            case 5: bytes.removeSubrange(index..<min(bytes.count, index + 1 + below(32)))
            case 6:
                let end = min(bytes.count, index + 1 + below(64))
                bytes.insert(contentsOf: bytes[index..<end], at: index)
            case 7:
                let other = others[below(others.count)]
                let start = below(other.count)
                bytes.replaceSubrange(
                    index..<min(bytes.count, index + below(64)),
                    with: other[start..<min(other.count, start + below(64))])
            default: bytes.removeLast(below(bytes.count) + 1)
            }
        }
        return bytes
    }
}
