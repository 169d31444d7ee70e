internal import CStorekeeperHTTPServer
import Foundation
public import StorekeeperLogging
import Synchronization

/// Limits the server enforces before a handler sees a request, and its deadlines.
public struct HTTPLimits: Sendable {
    /// Declared or received bodies larger than this are refused with 413 before they are read.
    public var maxBody = 1 << 20
    /// Request line and headers together.
    public var maxHeader = 16 << 10
    /// Path and query together.
    public var maxURL = 8 << 10
    public var maxQueryParameters = 256
    /// Concurrent connections; idle keep-alive connections cost no thread.
    public var maxConnections = 16_384
    /// Seconds a connection may stay without traffic.
    public var idleTimeout = 30
    /// A handler that has not answered after this long is answered 503 (`request_timeout`) for it.
    public var requestTimeout: Duration = .seconds(30)
    /// Event-loop threads (0: one per core).
    public var threads = 0
    /// Seconds a connection has to send a complete request head (request line and headers) after it
    /// connects; on a kept-alive connection the next head is due within ``idleTimeout`` of the previous
    /// answer. A client trickling a byte at a time is closed when its time is up (0: no deadline).
    public var headTimeout = 10
    /// Bytes a second a request body must average once its head is in, after a grace of ``headTimeout``
    /// (0: no minimum).
    public var minBodyRate = 1_024
    /// Connections one client address may hold at once (0: no cap).
    public var perAddressLimit = 1_024
    /// The last this many connections under ``maxConnections`` (at most a quarter of it) go only to
    /// addresses that hold none yet, so a new client is still answered while slow ones hold the rest.
    public var reservedConnections = 256
    /// Request bodies buffered for all requests in flight together; past it a request is answered 503
    /// (`server_busy`) before its body is read (0: no cap).
    public var maxBufferedBytes = 32 << 20

    public init() {}

    /// A setting the command line names (`--head-timeout` and so on), with its range and help.
    public struct Setting: Sendable {
        public let option: String
        public let range: ClosedRange<Int>
        public let help: String
        public let apply: @Sendable (inout HTTPLimits, Int) -> Void
    }

    /// The slow-client and body settings, named and ranged once for both servers' commands.
    public static let settings: [Setting] = [
        Setting(
            option: "head-timeout", range: 0...3_600, help: "Seconds to send a request head (default: 10; 0: none)."
        ) {
            $0.headTimeout = $1
        },
        Setting(
            option: "min-body-rate", range: 0...(1 << 30),
            help: "Bytes a second a request body must average (default: 1024; 0: none)."
        ) { $0.minBodyRate = $1 },
        Setting(
            option: "per-address-connections", range: 0...1_000_000,
            help: "Connections one client address may hold (default: 1024; 0: no cap)."
        ) { $0.perAddressLimit = $1 },
        Setting(
            option: "reserved-connections", range: 0...1_000_000,
            help: "Connections kept for client addresses that hold none (default: 256)."
        ) { $0.reservedConnections = $1 },
        Setting(
            option: "max-buffered-bytes", range: 0...(1 << 34),
            help: "Request body bytes buffered at once, all requests together (default: 33554432; 0: no cap)."
        ) { $0.maxBufferedBytes = $1 },
    ]

    /// Each connection's memory pool in libmicrohttpd for these limits.
    public var connectionMemory: Int { sk_server_connection_memory(maxHeader, maxURL) }
}

/// A certificate chain and its private key, both PEM, for an HTTPS server (libmicrohttpd's GnuTLS).
public struct TLSCredentials: Sendable {
    public var certificateChainPEM: String
    public var privateKeyPEM: String

    public init(certificateChainPEM: String, privateKeyPEM: String) {
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
    }

    /// Reads both files; an error names the file, never its contents.
    public init(certificateFile: String, keyFile: String) throws {
        guard let certificate = FileManager.default.contents(atPath: certificateFile) else {
            throw HTTPError(status: 0, code: "tls_files", message: "cannot read the certificate '\(certificateFile)'")
        }
        guard let key = FileManager.default.contents(atPath: keyFile) else {
            throw HTTPError(status: 0, code: "tls_files", message: "cannot read the private key '\(keyFile)'")
        }
        self.init(
            certificateChainPEM: String(decoding: certificate, as: UTF8.self),
            privateKeyPEM: String(decoding: key, as: UTF8.self))
    }
}

/// An HTTP/1.1 server on libmicrohttpd (through the small `CStorekeeperHTTPServer` C target): its own
/// epoll loop and a pool of threads. Each request's handler runs as a Swift task while the connection is
/// suspended, holding no thread; the answer resumes it. Bind port 0 to get a free port (``port``).
public final class HTTPServer: Sendable {
    public let port: Int
    public let host: String
    private let server: ServerHandle
    private let box: Unmanaged<HandlerBox>
    /// The same box, held strongly for what outlives the C server (the in-flight count).
    private let handlers: HandlerBox

    /// Starts serving `responder` on `host:port` ("127.0.0.1", "::1", "localhost", "0.0.0.0", "::"), over
    /// HTTPS when `tls` is given.
    public init(
        host: String = "127.0.0.1", port: Int = 0, limits: HTTPLimits = HTTPLimits(), tls: TLSCredentials? = nil,
        responder: Responder, logger: Logger = .disabled
    ) throws {
        let handlerBox = HandlerBox(responder: responder, limits: limits, logger: logger, https: tls != nil)
        handlers = handlerBox
        let box = Unmanaged.passRetained(handlerBox)
        var error = [CChar](repeating: 0, count: 256)
        let certificate = tls.map { strdup($0.certificateChainPEM) } ?? nil
        let key = tls.map { strdup($0.privateKeyPEM) } ?? nil
        defer {
            free(certificate)
            if let key {
                memset(key, 0, strlen(key))
                free(key)
            }
        }
        let started = host.withCString { hostPointer in
            var options = sk_server_options(
                host: hostPointer, port: UInt16(clamping: port), max_body: limits.maxBody,
                max_header_bytes: limits.maxHeader, max_url_bytes: limits.maxURL,
                max_query_parameters: UInt32(clamping: limits.maxQueryParameters),
                connection_limit: UInt32(clamping: limits.maxConnections),
                idle_timeout_seconds: UInt32(clamping: limits.idleTimeout), threads: UInt32(clamping: limits.threads),
                tls_certificate_pem: certificate, tls_key_pem: key,
                head_timeout_seconds: UInt32(clamping: limits.headTimeout),
                min_body_rate: UInt32(clamping: limits.minBodyRate),
                per_address_limit: UInt32(clamping: limits.perAddressLimit),
                reserved_connections: UInt32(clamping: limits.reservedConnections),
                max_buffered_bytes: limits.maxBufferedBytes, body_limit: bodyLimit)
            return sk_server_start(&options, handleRequest, box.toOpaque(), &error, error.count)
        }
        guard let started else {
            box.release()
            let reason = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let said =
                reason == "address in use"
                ? "another process listens there (stop it, or give another port; 0 picks a free one)" : reason
            throw HTTPError(status: 0, code: "listen_failed", message: "cannot listen on \(host):\(port): \(said)")
        }
        self.server = ServerHandle(pointer: started, box: handlerBox)
        self.box = box
        self.host = host
        self.port = Int(sk_server_port(started))
    }

    /// Connections open now.
    public var openConnections: Int { server.connections }

    /// Connections closed for a late head or a slow body, and connections refused at accept (per-address
    /// cap or reserve), since the start; request body bytes buffered now.
    public var protection: (slowClosed: Int, refused: Int, bufferedBytes: Int) { server.protection }

    /// Stops accepting connections; requests still running are answered 503. Idempotent.
    public func stop() {
        if server.stop() { box.release() }
    }

    /// Requests whose handlers are still running.
    public var requestsInFlight: Int { handlers.inFlight }

    /// A graceful stop: waits until no handler is running (or `grace` passed), then stops.
    public func stop(waitingUpTo grace: Duration) async {
        let deadline = ContinuousClock.now + grace
        while handlers.inFlight > 0, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        stop()
    }

    deinit { stop() }
}

/// The C server pointer, stopped at most once.
private final class ServerHandle: Sendable {
    // @unchecked Sendable: the pointer is read-only and handed to sk_server_stop once, under the mutex.
    private struct Raw: @unchecked Sendable {
        let pointer: OpaquePointer  // sk_server
    }

    private let state: Mutex<Raw?>
    private let box: HandlerBox

    init(pointer: OpaquePointer, box: HandlerBox) {
        state = Mutex(Raw(pointer: pointer))
        self.box = box
    }

    var connections: Int { state.withLock { $0.map { Int(sk_server_connections($0.pointer)) } ?? 0 } }

    var protection: (slowClosed: Int, refused: Int, bufferedBytes: Int) {
        state.withLock { raw in
            guard let raw else { return (0, 0, 0) }
            return (
                Int(sk_server_slow_closed(raw.pointer)), Int(sk_server_refused(raw.pointer)),
                sk_server_buffered_bytes(raw.pointer)
            )
        }
    }

    /// Returns whether this call stopped it.
    func stop() -> Bool {
        guard
            let raw = state.withLock({ current -> Raw? in
                defer { current = nil }
                return current
            })
        else { return false }
        // Exchanges still pending are answered 503 by sk_server_stop; the ones claimed here will never be
        // answered by their handlers, so they are given up (their late answers are dropped).
        let abandoned = box.closeAll()
        sk_server_stop(raw.pointer)
        for exchange in abandoned { exchange.abandon() }
        return true
    }
}

/// One request's pending answer: answered exactly once, by the handler, the deadline or the shutdown.
private final class Exchange: Sendable {
    // @unchecked Sendable: the pointer is used only by the single winner of `claim()`.
    private struct Raw: @unchecked Sendable {
        let pointer: OpaquePointer  // sk_exchange
    }

    private let raw: Raw
    private let answered = Atomic<Bool>(false)
    let id: Int
    let started = ContinuousClock.now
    /// The handler's task, cancelled when the deadline answers for it.
    let task = Mutex<Task<Void, Never>?>(nil)

    init(pointer: OpaquePointer, id: Int) {
        raw = Raw(pointer: pointer)
        self.id = id
    }

    /// Whether this caller won the right to answer.
    func claim() -> Bool {
        answered.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }

    /// Gives the exchange up without an answer, after winning `claim()`.
    func abandon() { sk_exchange_abandon(raw.pointer) }

    /// Sends the answer if nobody else has.
    func respond(_ response: HTTPResponse) {
        guard claim() else { return }
        Self.respond(raw.pointer, response)
    }

    /// Sends the answer on an exchange no one else can answer (a request answered inline).
    static func respond(_ exchange: OpaquePointer, _ response: HTTPResponse) {
        // Every name and value NUL-terminated in one buffer, and one array of pointers into it.
        var text: [CChar] = []
        text.reserveCapacity(response.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 2 })
        for header in response.headers {
            for byte in header.name.utf8 { text.append(CChar(bitPattern: byte)) }
            text.append(0)
            for byte in header.value.utf8 { text.append(CChar(bitPattern: byte)) }
            text.append(0)
        }
        text.withUnsafeMutableBufferPointer { text in
            var headers: [sk_header] = []
            headers.reserveCapacity(response.headers.count)
            var offset = 0
            for header in response.headers {
                let name = text.baseAddress! + offset
                offset += header.name.utf8.count + 1
                let value = text.baseAddress! + offset
                offset += header.value.utf8.count + 1
                headers.append(sk_header(name: name, value: value))
            }
            response.body.withUnsafeBufferPointer { body in
                headers.withUnsafeMutableBufferPointer { headerBuffer in
                    sk_exchange_respond(
                        exchange, UInt32(response.status), body.baseAddress, body.count, headerBuffer.baseAddress,
                        headerBuffer.count)
                }
            }
        }
    }
}

private final class HandlerBox: Sendable {
    /// Handler tasks run here, not on the global cooperative pool: code elsewhere in the process that
    /// blocks a pool thread cannot hold the server's answers back.
    let executor = HandlerExecutor()
    let responder: Responder
    let limits: HTTPLimits
    let logger: Logger
    /// Under HTTPS every answer tells browsers to come back over HTTPS only (HSTS, a year).
    let https: Bool
    private let pending = Mutex<(next: Int, open: [Int: Exchange])>((0, [:]))
    private let sweeper = Mutex<Task<Void, Never>?>(nil)
    /// Handler tasks not yet ended, those the deadline has answered for included: at most
    /// ``HTTPLimits/maxConnections`` (a connection freed by the deadline does not free its handler's work).
    private let running = Atomic<Int>(0)

    /// Counts a handler about to start; false when as many run as connections are allowed.
    func startHandler() -> Bool {
        guard running.wrappingAdd(1, ordering: .relaxed).newValue <= limits.maxConnections else {
            running.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    func handlerEnded() { running.wrappingSubtract(1, ordering: .relaxed) }

    init(responder: Responder, limits: HTTPLimits, logger: Logger, https: Bool) {
        self.responder = responder
        self.limits = limits
        self.logger = logger
        self.https = https
        sweeper.withLock {
            $0 = Task(executorPreference: executor) { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(250))
                    self?.answerOverdue()
                }
            }
        }
    }

    deinit { sweeper.withLock { $0?.cancel() } }

    /// Answers 503 for every request whose handler is past the request deadline (its late answer is dropped).
    private func answerOverdue() {
        let now = ContinuousClock.now
        let overdue = pending.withLock { state -> [Exchange] in
            let late = state.open.values.filter { now - $0.started > limits.requestTimeout }
            for exchange in late { state.open.removeValue(forKey: exchange.id) }
            return Array(late)
        }
        for exchange in overdue {
            exchange.task.withLock { $0?.cancel() }
            logger.warning("request.deadline", ["request.deadline.seconds": String(describing: limits.requestTimeout)])
            exchange.respond(
                HTTPError(status: 503, code: "request_timeout", message: "the request took too long to answer").response
            )
        }
    }

    func register(_ pointer: OpaquePointer) -> Exchange {
        pending.withLock { state in
            state.next += 1
            let exchange = Exchange(pointer: pointer, id: state.next)
            state.open[state.next] = exchange
            return exchange
        }
    }

    /// The answer as sent: with HSTS under HTTPS.
    func sent(_ response: HTTPResponse) -> HTTPResponse {
        guard https else { return response }
        var response = response
        response.headers.append(("Strict-Transport-Security", "max-age=31536000"))
        return response
    }

    func finish(_ exchange: Exchange) { _ = pending.withLock { $0.open.removeValue(forKey: exchange.id) } }

    var inFlight: Int { pending.withLock { $0.open.count } }

    /// Claims every pending exchange (the C server answers them 503 as it stops); returns the ones won,
    /// which the caller abandons once the server has stopped.
    func closeAll() -> [Exchange] {
        sweeper.withLock { $0?.cancel() }
        let open = pending.withLock { state -> [Exchange] in
            defer { state.open.removeAll() }
            return Array(state.open.values)
        }
        return open.filter { $0.claim() }
    }
}

/// The C callback asked once a request's headers are in: the largest body its route takes from this sender.
private func bodyLimit(
    context: UnsafeMutableRawPointer?, method: UnsafePointer<CChar>?, path: UnsafePointer<CChar>?,
    authorization: UnsafePointer<CChar>?
) -> Int {
    guard let context, let method, let path else { return 0 }
    let box = Unmanaged<HandlerBox>.fromOpaque(context).takeUnretainedValue()
    return box.responder.bodyLimit(
        method: String(cString: method), path: String(cString: path),
        authorization: authorization.map { String(cString: $0) }, default: box.limits.maxBody)
}

/// The C callback, on one of libmicrohttpd's pool threads: turns the request into Swift values and starts
/// the handler as a task; the connection stays suspended until the task (or the deadline) answers.
private func handleRequest(
    context: UnsafeMutableRawPointer?, exchange: OpaquePointer?, request: UnsafePointer<sk_request>?
) {
    guard let context, let exchange, let raw = request?.pointee else { return }
    let box = Unmanaged<HandlerBox>.fromOpaque(context).takeUnretainedValue()
    var headers: [(name: String, value: String)] = []
    headers.reserveCapacity(raw.header_count)
    for index in 0..<raw.header_count {
        headers.append((String(cString: raw.headers[index].name), String(cString: raw.headers[index].value)))
    }
    var parameters: [HTTPQuery.Parameter] = []
    parameters.reserveCapacity(raw.query_count)
    var malformed = false
    for index in 0..<raw.query_count {
        guard let name = PercentDecoding.decode(Substring(String(cString: raw.query[index].name)), plusIsSpace: true),
            let value = PercentDecoding.decode(
                Substring(String(cString: raw.query[index].value)), plusIsSpace: true)
        else {
            malformed = true
            break
        }
        parameters.append(HTTPQuery.Parameter(name: name, value: value))
    }
    let body =
        raw.body_length > 0 && raw.body != nil
        ? Array(UnsafeBufferPointer(start: raw.body, count: raw.body_length)) : []
    let request = HTTPRequest(
        method: String(cString: raw.method), path: String(cString: raw.path), query: HTTPQuery(parameters),
        headers: headers, body: body, remoteAddress: raw.remote.map { String(cString: $0) })
    if malformed {
        let error = HTTPError(status: 400, code: "invalid_query", message: "the query has a malformed percent-escape")
        Exchange.respond(exchange, box.sent(box.responder.refusal(error, for: request)))
        return
    }
    // Routes that need not await answer here, on the pool thread: no task, no suspension.
    if let response = box.responder.respondInline(to: request) {
        Exchange.respond(exchange, box.sent(response))
        return
    }
    guard box.startHandler() else {
        let error = HTTPError(status: 503, code: "busy", message: "too many requests are being handled")
        Exchange.respond(exchange, box.sent(box.responder.refusal(error, for: request)))
        return
    }
    let pendingExchange = box.register(exchange)
    let task = Task(executorPreference: box.executor) {
        defer { box.handlerEnded() }
        let response = await box.responder.respond(to: request)
        pendingExchange.respond(box.sent(response))
        box.finish(pendingExchange)
    }
    pendingExchange.task.withLock { $0 = task }
}

/// A task executor over a concurrent dispatch queue of the server's own, preferred by every handler task
/// and the tasks it starts. libdispatch runs concurrent queues on as many threads as there are cores (the
/// threads Swift's cooperative pool also runs on): right for handlers, which compute and await but never
/// block; blocking work (outbound HTTP, SQLite) runs on serial queues, whose threads overcommit.
final class HandlerExecutor: TaskExecutor {
    private let queue = DispatchQueue(label: "storekeeper.http.handlers", attributes: .concurrent)

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor { UnownedTaskExecutor(ordinary: self) }
}
