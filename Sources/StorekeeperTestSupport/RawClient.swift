import Foundation
import StorekeeperJSON

#if canImport(Glibc)
    import Glibc
#endif

/// A raw TCP client for requests no ordinary client will send (conflicting lengths, odd codings).
public struct RawClient: Sendable {
    public let descriptor: Int32

    /// `source`: the IPv4 loopback address to connect from (127.0.0.2, say), so one test can be two clients.
    public init(port: Int, host: String = "127.0.0.1", source: String? = nil) throws {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let first = list else {
            throw RawError(message: "cannot resolve \(host)")
        }
        defer { freeaddrinfo(list) }
        let descriptor = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        if let source, descriptor >= 0 {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                Glibc.close(descriptor)
                throw RawError(message: "cannot bind \(source)")
            }
        }
        guard descriptor >= 0, connect(descriptor, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            if descriptor >= 0 { Glibc.close(descriptor) }
            throw RawError(message: "cannot connect to \(host):\(port)")
        }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        self.descriptor = descriptor
    }

    public struct RawError: Error { public let message: String }

    public func send(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Everything the server sends until it closes the connection, a complete response has arrived, or
    /// five seconds pass.
    public func receive() -> String {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += buffer[0..<count]
            let text = String(decoding: received, as: UTF8.self)
            if let headerEnd = text.range(of: "\r\n\r\n"),
                let lengthLine = text[..<headerEnd.lowerBound].split(separator: "\r\n").first(where: {
                    $0.lowercased().hasPrefix("content-length:")
                }), let length = Int(lengthLine.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)),
                text.utf8.count - text.utf8.distance(from: text.startIndex, to: headerEnd.upperBound) >= length
            {
                break
            }
        }
        return String(decoding: received, as: UTF8.self)
    }

    public func close() { Glibc.close(descriptor) }

    /// Runs blocking socket work on a thread of its own: the cooperative pool must stay free for the
    /// server's handlers (with two cores, two blocked test threads would starve them).
    public static func offPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Sends a request and returns the status and the JSON error code of the answer.
    public static func exchange(port: Int, _ request: String) async throws -> (status: Int, code: String?, raw: String)
    {
        try await offPool { try exchangeBlocking(port: port, request) }
    }

    public static func exchangeBlocking(port: Int, _ request: String) throws -> (
        status: Int, code: String?, raw: String
    ) {
        let client = try RawClient(port: port)
        defer { client.close() }
        client.send(request)
        let text = client.receive()
        let status = text.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        var code: String?
        if let body = text.range(of: "\r\n\r\n") {
            code = (try? JSONParser.parse(Array(text[body.upperBound...].utf8)))?["error"]?["code"]?.stringValue
        }
        return (status, code, text)
    }
}
