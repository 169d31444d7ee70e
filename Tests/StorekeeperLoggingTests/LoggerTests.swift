import Foundation
import StorekeeperLogging
import Testing

@Suite("Logger")
struct LoggerTests {
    @Test("records below the level are dropped; metadata merges, the call's own winning")
    func levelsAndMetadata() {
        let memory = InMemoryLogHandler()
        var logger = Logger(label: "test", level: .info, metadata: ["a": "1", "b": "2"], handler: memory)
        logger.debug("hidden")
        logger.info("shown", ["b": "3"])
        logger.level = .error
        logger.warning("hidden too")
        logger.error("failed")
        #expect(memory.records.map(\.message) == ["shown", "failed"])
        #expect(memory.records[0].metadata == ["a": "1", "b": "3"])
        #expect(memory.records[1].level == .error)
    }

    @Test(
        "secrets are redacted before any handler sees them",
        arguments: [
            "password", "request.authorization", "app.sharedSecret", "receipt-data", "signedPayload", "api.key",
            "bearerToken", "jws",
        ])
    func redaction(key: String) {
        let memory = InMemoryLogHandler()
        Logger(label: "test", handler: memory).info("event", [key: "hunter2", "request.id": "r1"])
        #expect(memory.records[0].metadata[key] == "<redacted>")
        #expect(memory.records[0].metadata["request.id"] == "r1")
    }

    @Test("text and JSON lines")
    func rendering() throws {
        let record = LogRecord(
            date: Date(timeIntervalSince1970: 1_764_547_200.5), level: .notice, label: "http",
            message: "request answered", metadata: ["response.status": "200", "request.path": "/a b"])
        #expect(
            StreamLogHandler.render(record, format: .text)
                == "2025-12-01T00:00:00.500Z notice http: request answered request.path=\"/a b\" response.status=200")
        let json = StreamLogHandler.render(record, format: .json)
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String])
        #expect(object["level"] == "notice")
        #expect(object["request.path"] == "/a b")
        #expect(object["time"] == "2025-12-01T00:00:00.500Z")
    }

    @Test("Timestamps worked out with integers match the Gregorian calendar, to the second, from 1600 to 9999")
    func timestamps() {
        var generator = SystemRandomNumberGenerator()
        let fixed: [TimeInterval] = [
            0, -1, 86_399, 86_400, 951_782_400, 951_868_799, 951_868_800, -2_203_891_200, 4_107_542_400,
            1_796_471_254.397, -11_676_096_000, 253_402_300_799,
        ]
        // Foundation's calendar is Julian before 1582; ours (as gmtime's) is Gregorian throughout.
        let random = (0..<5_000).map { _ in
            TimeInterval(Int64.random(in: -11_676_096_000...253_402_300_799, using: &generator))
        }
        for seconds in fixed + random {
            let date = Date(timeIntervalSince1970: seconds)
            let line = StreamLogHandler.render(
                LogRecord(date: date, level: .info, label: "t", message: "m", metadata: [:]), format: .text)
            let expected = date.formatted(.iso8601).dropLast()  // 2026-12-01T10:00:00 without its Z
            #expect(line.prefix(19) == expected, "\(seconds)")
            #expect(line.dropFirst(19).prefix(5).first == ".", "\(seconds)")
        }
        let line = StreamLogHandler.render(
            LogRecord(
                date: Date(timeIntervalSince1970: 1_796_471_254.397), level: .info, label: "t", message: "m",
                metadata: [:]), format: .text)
        #expect(line.hasPrefix("2026-12-05T11:47:34.397Z info t: m"))
    }

    @Test("Buffered lines reach the file whole and in order from concurrent writers, on flush and on the timer")
    func buffered() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("log-\(UUID().uuidString)").path
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try #require(FileHandle(forWritingAtPath: path))
        let handler = StreamLogHandler(output: file, flushEvery: .milliseconds(20))
        let logger = Logger(label: "test", handler: handler)
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<8 {
                group.addTask {
                    for line in 0..<2_000 {
                        logger.info(
                            "line",
                            ["writer": String(writer), "n": String(line), "pad": String(repeating: "x", count: 40)])
                    }
                }
            }
        }
        handler.flush()
        let lines = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
            .split(separator: "\n")
        #expect(lines.count == 16_000)
        // Each writer's lines in its own order, none torn.
        var next = [Int](repeating: 0, count: 8)
        for line in lines {
            let fields = Dictionary(
                uniqueKeysWithValues: line.split(separator: " ").dropFirst(4).compactMap { field -> (String, String)? in
                    let parts = field.split(separator: "=", maxSplits: 1)
                    return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
                })
            guard let writer = fields["writer"].flatMap({ Int($0) }), let n = fields["n"].flatMap({ Int($0) }) else {
                Issue.record("torn line: \(line)")
                continue
            }
            #expect(n == next[writer], "writer \(writer)")
            next[writer] = n + 1
        }
        // Without a flush, the handler's own thread writes within its interval.
        logger.warning("late")
        var seen = false
        for _ in 0..<200 where !seen {
            try await Task.sleep(for: .milliseconds(10))
            seen = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self).contains("late")
        }
        #expect(seen)
    }

    @Test("level names parse as swift-log's")
    func levelNames() {
        #expect(Logger.Level(name: "WARNING") == .warning)
        #expect(Logger.Level(name: "verbose") == nil)
        #expect(Logger.Level.allCases.map(\.description).count == 7)
    }
}
