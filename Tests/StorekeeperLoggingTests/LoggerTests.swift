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

    @Test("level names parse as swift-log's")
    func levelNames() {
        #expect(Logger.Level(name: "WARNING") == .warning)
        #expect(Logger.Level(name: "verbose") == nil)
        #expect(Logger.Level.allCases.map(\.description).count == 7)
    }
}
