import Foundation
import StorekeeperHTTP
import StorekeeperTestSupport
import Testing

/// The access log is buffered off the request path; a clean stop writes what is buffered.
@Suite("storekeeper appstore serve: the access log on a clean stop")
struct LoggingProcessTests {
    @Test(
        "Every request answered before SIGTERM has its access line in the log",
        .enabled(if: ExecutableTests.binary != nil, "storekeeper binary not built"))
    func flushedOnStop() async throws {
        let binary = try #require(ExecutableTests.binary)
        let directory = try ExternalTool.temporaryDirectory()
        let log = directory.appendingPathComponent("stderr.log")
        #expect(FileManager.default.createFile(atPath: log.path, contents: nil))
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        // The handler's thread waits a minute between writes: only the clean stop can write these lines.
        process.arguments = ["appstore", "serve", "--port", "0", "--data", directory.appendingPathComponent("d").path]
        process.environment = ProcessInfo.processInfo.environment.merging(["STOREKEEPER_LOG_FLUSH_MS": "60000"]) {
            $1
        }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
        var line: [UInt8] = []
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let text = String(decoding: line, as: UTF8.self)
        let base = try #require(
            text.range(of: "http://[^ \n]+:[0-9]+", options: .regularExpression).map { String(text[$0]) })
        let count = 50
        for index in 0..<count {
            let response = try await HTTPClient().send("GET", base + "/_emulator/v1/clock?n=\(index)")
            #expect(response.status == 200)
        }
        process.terminate()
        process.waitUntilExit()
        let written = String(decoding: try Data(contentsOf: log), as: UTF8.self)
        let answered = written.split(separator: "\n").filter {
            $0.contains("request answered") && $0.contains("request.path=/_emulator/v1/clock")
        }
        #expect(answered.count == count, "\(written.suffix(2_000))")
    }
}
