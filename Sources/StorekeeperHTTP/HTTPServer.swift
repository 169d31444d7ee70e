internal import CStorekeeperHTTPServer
import Foundation
import Synchronization

/// Limits the server enforces before a handler sees a request.
public struct HTTPLimits: Sendable {
    public var maxBody = 1 << 20
    public var maxHeader = 32 << 10
    public var maxConnections = 256
    /// Seconds an idle connection is kept.
    public var idleTimeout = 30

    public init() {}
}

/// An HTTP/1.1 server on libmicrohttpd (through the small `CHTTPServer` C target) answering with a
/// ``Responder``; bind port 0 to get a free port (``port`` tells which).
public final class HTTPServer: Sendable {
    public let port: Int
    private let server: ServerHandle
    private let box: Unmanaged<HandlerBox>

    /// Starts serving `responder` on `host:port`; `log` receives one access-log line per request.
    public init(
        host: String = "127.0.0.1", port: Int = 0, limits: HTTPLimits = HTTPLimits(), responder: Responder,
        log: (@Sendable (String) -> Void)? = nil
    ) throws {
        let box = Unmanaged.passRetained(HandlerBox(responder: responder, log: log))
        guard
            let server = sk_server_start(
                host, UInt16(clamping: port), limits.maxBody, limits.maxHeader, UInt32(limits.maxConnections),
                UInt32(limits.idleTimeout), handleRequest, box.toOpaque())
        else {
            box.release()
            throw HTTPError(status: 0, code: "listen_failed", message: "cannot listen on \(host):\(port)")
        }
        self.server = ServerHandle(pointer: server)
        self.box = box
        self.port = Int(sk_server_port(server))
    }

    /// Stops accepting connections and waits for running requests; idempotent.
    public func stop() {
        if server.stop() { box.release() }
    }

    deinit { stop() }
}

/// The C server pointer, stopped at most once.
private final class ServerHandle: Sendable {
    // @unchecked Sendable: the pointer is only handed to sk_server_stop, once, under the mutex.
    private struct Raw: @unchecked Sendable {
        let pointer: OpaquePointer  // sk_server
    }

    private let state: Mutex<Raw?>

    init(pointer: OpaquePointer) { state = Mutex(Raw(pointer: pointer)) }

    /// Returns whether this call stopped it.
    func stop() -> Bool {
        guard
            let raw = state.withLock({ current -> Raw? in
                defer { current = nil }
                return current
            })
        else { return false }
        sk_server_stop(raw.pointer)
        return true
    }
}

private final class HandlerBox: Sendable {
    let responder: Responder
    let log: (@Sendable (String) -> Void)?

    init(responder: Responder, log: (@Sendable (String) -> Void)?) {
        self.responder = responder
        self.log = log
    }
}

/// Receives the outcome of an async handler on the libmicrohttpd thread that waits for it.
private final class Outcome: Sendable {
    let value = Mutex<HTTPResponse?>(nil)
    let done = DispatchSemaphore(value: 0)
}

/// The C callback: runs on one of libmicrohttpd's threads, which may block until the handler is done.
private func handleRequest(
    context: UnsafeMutableRawPointer?, request: UnsafePointer<sk_request>?, response: OpaquePointer?
) {
    guard let context, let raw = request?.pointee, let response else { return }
    let box = Unmanaged<HandlerBox>.fromOpaque(context).takeUnretainedValue()
    var headers: [(name: String, value: String)] = []
    for index in 0..<raw.header_count {
        let header = raw.headers[index]
        headers.append((String(cString: header.name), String(cString: header.value)))
    }
    var query: [String: String] = [:]
    for pair in String(cString: raw.query).split(separator: "&") {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        query[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
    }
    let body =
        raw.body_length > 0 && raw.body != nil
        ? Array(UnsafeBufferPointer(start: raw.body, count: raw.body_length)) : []
    let incoming = HTTPRequest(
        method: String(cString: raw.method), path: String(cString: raw.url), query: query, headers: headers, body: body)
    let started = ContinuousClock.now
    let outcome = Outcome()
    Task {
        let answer = await box.responder.respond(to: incoming)
        outcome.value.withLock { $0 = answer }
        outcome.done.signal()
    }
    outcome.done.wait()
    let answer =
        outcome.value.withLock { $0 } ?? HTTPError(status: 500, code: "internal_error", message: "no response").response
    let names = answer.headers.map { strdup($0.name) }
    let values = answer.headers.map { strdup($0.value) }
    defer { (names + values).forEach { free($0) } }
    var cHeaders = zip(names, values).map { sk_header(name: $0, value: $1) }
    answer.body.withUnsafeBufferPointer { bodyBuffer in
        cHeaders.withUnsafeMutableBufferPointer { headerBuffer in
            sk_response_send(
                response, UInt32(answer.status), bodyBuffer.baseAddress, bodyBuffer.count, headerBuffer.baseAddress,
                headerBuffer.count)
        }
    }
    if let log = box.log {
        let elapsed = ContinuousClock.now - started
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        log(
            "request.method=\(incoming.method) request.path=\(incoming.path) response.status=\(answer.status) "
                + "response.bytes=\(answer.body.count) duration.ms=\(String(format: "%.2f", milliseconds))")
    }
}
