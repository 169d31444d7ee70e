import Foundation
import StorekeeperCrypto
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sends a DER OCSP request to a responder and returns the DER response body.
public protocol OCSPTransport: Sendable {
    /// The response body of an HTTP 200; throws ``OCSPTransportError`` for network failures and other statuses.
    func post(_ body: [UInt8], to url: String) async throws(OCSPTransportError) -> [UInt8]
}

public struct OCSPTransportError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// HTTP POST with `Content-Type: application/ocsp-request`, 30 seconds for the whole exchange and a 1 MiB
/// response cap, as Apple's libraries do (the cap is checked once the answer is in; the storekeeper command
/// uses a libcurl transport that stops reading at it).
public struct URLSessionOCSPTransport: OCSPTransport {
    /// Its own session: the shared one lets a trickling answer run for up to a week.
    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 30
        configuration.timeoutIntervalForResource = 30
        return URLSession(configuration: configuration)
    }()

    public init() {}

    public func post(_ body: [UInt8], to url: String) async throws(OCSPTransportError) -> [UInt8] {
        guard let endpoint = URL(string: url), endpoint.scheme == "http" || endpoint.scheme == "https" else {
            throw OCSPTransportError("responder URL '\(url)' is not HTTP")
        }
        var request = URLRequest(url: endpoint, timeoutInterval: 30)
        request.httpMethod = "POST"
        request.setValue("application/ocsp-request", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(body)
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await Self.session.data(for: request)
        } catch {
            throw OCSPTransportError("OCSP responder unreachable: \(error.localizedDescription)")
        }
        if let http = response as? HTTPURLResponse, http.statusCode != 200 {
            throw OCSPTransportError("OCSP responder answered HTTP \(http.statusCode)")
        }
        guard data.count <= 1 << 20 else { throw OCSPTransportError("OCSP response larger than 1 MiB") }
        return Array(data)
    }
}

/// Checks the intermediate and the leaf of a validated path with their OCSP responders, remembering good
/// answers for 15 minutes (at most 32 paths), like Apple's libraries.
final class OCSPChecker: Sendable {
    enum Outcome: Equatable {
        case good
        /// The responder could not be reached: a retryable failure.
        case unreachable(String)
        case failed(String)
    }

    private let transport: any OCSPTransport
    private let cache = Mutex<[[UInt8]: Date]>([:])
    static let lifetime: TimeInterval = 15 * 60
    static let capacity = 32

    init(transport: any OCSPTransport) { self.transport = transport }

    /// `path` is leaf, intermediate, root.
    func check(path: [Certificate], now: Date) async -> Outcome {
        guard path.count == 3 else { return .failed("OCSP needs a path of three certificates") }
        let key = path[0].derEncoded + path[1].derEncoded
        if let checked = cache.withLock({ $0[key] }), now.timeIntervalSince(checked) < Self.lifetime { return .good }
        for (certificate, issuer) in [(path[1], path[2]), (path[0], path[1])] {
            let outcome = await checkOne(certificate, issuer: issuer, root: path[2], now: now)
            guard outcome == .good else { return outcome }
        }
        cache.withLock { entries in
            entries = entries.filter { now.timeIntervalSince($0.value) < Self.lifetime }
            if entries.count >= Self.capacity, let oldest = entries.min(by: { $0.value < $1.value }) {
                entries[oldest.key] = nil
            }
            entries[key] = now
        }
        return .good
    }

    private func checkOne(_ certificate: Certificate, issuer: Certificate, root: Certificate, now: Date) async
        -> Outcome
    {
        let request: (der: [UInt8], url: String?)
        do {
            request = try OCSP.request(for: certificate, issuer: issuer)
        } catch {
            return .failed("cannot build an OCSP request: \(error)")
        }
        guard let url = request.url else { return .failed("certificate names no OCSP responder") }
        let body: [UInt8]
        do {
            body = try await transport.post(request.der, to: url)
        } catch {
            return .unreachable(error.description)
        }
        switch OCSP.evaluate(response: body, certificate: certificate, issuer: issuer, root: root, now: now) {
        case .good: return .good
        case .revoked: return .failed("certificate revoked: \(certificate.subject)")
        case .invalid(let reason): return .failed(reason)
        }
    }
}
