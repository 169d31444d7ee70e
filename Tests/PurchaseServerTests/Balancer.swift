import Foundation
import StorekeeperHTTP
import StorekeeperJSON
import Synchronization

/// What the network does to Apple's notifications on their way to the servers, by a stable hash of each
/// notification's UUID (so every attempt of one notification meets the same fate): passed on once, to
/// two servers at once (duplicated), held back for a while so that later ones overtake it (delayed,
/// reordered), or refused on every attempt (dropped: Apple records the failure, and only reconciliation
/// can repair it).
struct NotificationFaults: Sendable, Hashable {
    /// Percentages of notifications.
    var duplicated = 0
    var delayed = 0
    var dropped = 0

    static let none = NotificationFaults()
    static let rough = NotificationFaults(duplicated: 20, delayed: 20, dropped: 15)
}

/// A round-robin load balancer in front of several server instances, injecting ``NotificationFaults``
/// into `POST /v1/notifications/apple/…`; everything else is passed on as it is.
final class Balancer: Sendable {
    let server: HTTPServer
    let ports: [Int]
    let faults: NotificationFaults
    private let next = Atomic<Int>(0)
    private let delayed = Atomic<Int>(0)
    /// What happened to each notification, by fate (`passed`, `duplicated`, `delayed`, `dropped`).
    let fates = Mutex<[String: Set<String>]>([:])

    init(ports: [Int], faults: NotificationFaults) throws {
        self.ports = ports
        self.faults = faults
        var router = Router()
        let forwarder = Forwarder()
        for method in ["GET", "POST", "PUT", "DELETE"] {
            var pattern = ""
            for depth in 1...7 {
                pattern += "/{p\(depth)}"
                router.add(method, pattern) { request, _ in
                    guard let self = forwarder.balancer else { return HTTPResponse(status: 503) }
                    return await self.handle(request)
                }
            }
        }
        server = try HTTPServer(port: 0, responder: router.freeze())
        forwarder.balancer = self
    }

    /// Notifications held back and not yet passed on.
    var delayedInFlight: Int { delayed.load(ordering: .relaxed) }

    func count(_ fate: String) -> Int { fates.withLock { $0[fate]?.count ?? 0 } }

    private func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let target = next.add(1, ordering: .relaxed).newValue
        guard request.method == "POST", request.path.hasPrefix("/v1/notifications/apple/"),
            let uuid = Self.notificationUUID(request.body)
        else { return await forward(request, to: target) }
        let roll = Int(Self.stableHash(uuid) % 100)
        if roll < faults.dropped {
            record("dropped", uuid)
            return HTTPResponse(status: 503)
        } else if roll < faults.dropped + faults.duplicated {
            record("duplicated", uuid)
            async let first = forward(request, to: target)
            async let second = forward(request, to: target + 1)
            let answers = await [first, second]
            return answers.first { $0.status == 200 } ?? answers[0]
        } else if roll < faults.dropped + faults.duplicated + faults.delayed {
            record("delayed", uuid)
            delayed.add(1, ordering: .relaxed)
            Task {
                try? await Task.sleep(for: .milliseconds(400))
                _ = await self.forward(request, to: target)
                self.delayed.subtract(1, ordering: .relaxed)
            }
            return HTTPResponse(status: 200)
        }
        record("passed", uuid)
        return await forward(request, to: target)
    }

    private func record(_ fate: String, _ uuid: String) {
        fates.withLock { _ = $0[fate, default: []].insert(uuid) }
    }

    private func forward(_ request: HTTPRequest, to index: Int) async -> HTTPResponse {
        let port = ports[index % ports.count]
        var url = "http://127.0.0.1:\(port)\(request.path)"
        if !request.query.isEmpty {
            let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
            url +=
                "?"
                + request.query.parameters.map {
                    ($0.name.addingPercentEncoding(withAllowedCharacters: allowed) ?? "") + "="
                        + ($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
                }.joined(separator: "&")
        }
        let headers = request.headers.filter { ["authorization", "content-type"].contains($0.name.lowercased()) }
        do {
            let response = try await HTTPClient(timeout: .seconds(30)).send(
                request.method, url, headers: headers, body: request.body)
            return HTTPResponse(
                status: response.status, headers: [("Content-Type", "application/json")], body: response.body)
        } catch {
            return HTTPResponse(status: 502)
        }
    }

    /// The notification's UUID, read from the JWS payload without verifying it (the servers verify).
    static func notificationUUID(_ body: [UInt8]) -> String? {
        guard let signed = (try? JSONParser.parse(body))?["signedPayload"]?.stringValue else { return nil }
        let parts = signed.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64) else { return nil }
        return (try? JSONParser.parse(Array(data)))?["notificationUUID"]?.stringValue
    }

    /// FNV-1a: the same for a UUID in every run.
    static func stableHash(_ text: String) -> UInt64 {
        text.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
    }
}

/// Lets the routes reach the balancer that owns them once it exists.
private final class Forwarder: @unchecked Sendable {
    weak var balancer: Balancer?
}
