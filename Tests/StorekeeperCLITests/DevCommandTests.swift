import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// `storekeeper dev` as a real process: both halves come up on the ports asked for, print where they are,
/// and stop together on Ctrl-C.
@Suite("storekeeper dev")
struct DevCommandTests {
    @Test(
        "Starts the emulator and the server, prints their URLs and keys, stops both on SIGINT",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func startAndStop() async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let data = directory.appendingPathComponent("rehearsal")
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: try #require(ExecutableTests.binary))
        process.arguments = ["dev", "--port", "0", "--server-port", "0", "--data", data.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Whatever happens below, the process does not outlive the test.
        defer {
            if process.isRunning { process.terminate() }
        }
        var text = ""
        while !text.contains("storekeeper server subscriber") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        func url(after label: String) -> String? {
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("  " + label) }),
                let range = line.range(of: "http://127.0.0.1:[0-9]+", options: .regularExpression)
            else { return nil }
            return String(line[range])
        }
        let emulator = try #require(url(after: "emulator "), "\(text)")
        let server = try #require(url(after: "purchase server "), "\(text)")
        #expect(text.contains("configuration    \(data.path)/server.json (written now)"))
        #expect(text.contains("entitlements     pro, season, storekeeper-plus"))
        #expect(!text.contains("sk_"), "the secret key stays in the file")
        let clock = try await HTTPClient().send("GET", emulator + "/_emulator/v1/clock")
        #expect(clock.status == 200)
        #expect(try await HTTPClient().send("GET", server + "/healthz").status == 200)
        // The dashboards it prints are there (their sign-in form first).
        for line in text.split(separator: "\n") where line.contains("(dashboard ") {
            let range = try #require(line.range(of: "http://127.0.0.1:[0-9]+/[a-z/_]+", options: .regularExpression))
            let status = try await HTTPClient().send("GET", String(line[range])).status
            #expect([200, 303].contains(status), "\(line[range]) answered \(status)")
        }
        let mode =
            try FileManager.default.attributesOfItem(atPath: data.appendingPathComponent("server.json").path)[
                .posixPermissions] as? Int
        #expect(mode == 0o600)

        process.interrupt()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let rest = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(rest.contains("stopped"))
        await #expect(throws: HTTPClientError.self) { _ = try await HTTPClient().send("GET", server + "/healthz") }
        await #expect(throws: HTTPClientError.self) {
            _ = try await HTTPClient().send("GET", emulator + "/_emulator/v1/clock")
        }

        // Started again for another app on the same data: the configuration written for the first has no such
        // app, and dev says so (exit 2) rather than start with it unwired.
        let again = ChildProcess()
        again.executableURL = process.executableURL
        again.arguments = process.arguments + ["--bundle-id", "com.example.other"]
        let errors = Pipe()
        again.standardOutput = FileHandle.nullDevice
        again.standardError = errors
        try again.run()
        defer {
            if again.isRunning { again.terminate() }
        }
        let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        again.waitUntilExit()
        #expect(again.terminationStatus == 2, "\(said)")
        #expect(said.contains("has no app com.example.other (it configures com.example.storekeeper)"), "\(said)")
    }
}
