import Foundation
import StorekeeperCrypto
import StorekeeperDashboard
public import StorekeeperHTTP
import Synchronization

/// Protects everything the emulator serves except Apple's own paths (`/verifyReceipt`,
/// `/sandbox/verifyReceipt`, `/inApps/…`, `/sandbox/inApps/…`, which keep Apple's behaviour and
/// authentication) from web pages and other hosts — deny by default: the control plane (`/_emulator/…`), the
/// dashboard (`/`, `/dashboard/…`) and any path added later. The responder has already refused
/// non-canonical paths (`//`, `.`, `..`, encoded slashes), so the prefix checks here see the path the router
/// routes:
///
/// - the `Host` header must name one of the addresses the emulator answers to (DNS rebinding);
/// - an `Origin` header must be the emulator's own (a page elsewhere cannot drive it);
/// - state-changing requests must be `Content-Type: application/json` (which a browser cannot send
///   cross-origin without a preflight the emulator never grants);
/// - with a token, `Authorization: Bearer <token>` is required, or the dashboard's session cookie (signed in
///   at `/dashboard/login` with the token); a signed-out dashboard page is sent to the form.
public final class ControlPlaneGuard: InlineMiddleware {
    /// Host names (without port) the control plane answers to.
    public let allowedHosts: Set<String>
    let login: DashboardLogin
    private let port = Atomic<Int>(0)
    /// Apple's own endpoints: not the control plane.
    static let applePaths: Set<String> = ["/verifyReceipt", "/sandbox/verifyReceipt"]
    static let applePrefixes = ["/inApps/", "/sandbox/inApps/"]
    /// Reachable without the token: the sign-in form (a form post) and the stylesheet and script.
    static let open = ["/dashboard/login", "/dashboard/logout", "/dashboard/assets/"]

    /// `extraHosts` adds names (a reverse proxy's, say) to the loopback ones; `token` requires a bearer
    /// token.
    public init(listeningOn host: String, extraHosts: [String] = [], token: String? = nil) {
        var hosts: Set<String> = ["127.0.0.1", "localhost", "::1", "[::1]"]
        if !["0.0.0.0", "::", ""].contains(host) { hosts.insert(Self.bare(host).lowercased()) }
        for extra in extraHosts { hosts.insert(Self.bare(extra).lowercased()) }
        allowedHosts = hosts
        login = DashboardLogin(
            root: "/dashboard", product: "App Store emulator", assets: "/dashboard/assets", secret: token,
            cookieName: "storekeeper_emulator")
    }

    /// The port the server bound (known after it starts); until set, any port is accepted in `Origin`.
    public func setPort(_ value: Int) { port.store(value, ordering: .releasing) }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
        try check(request)
        return try await next(request, context)
    }

    public func handleInline(
        _ request: HTTPRequest, context: RequestContext, next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
    ) throws -> HTTPResponse? {
        try check(request)
        return try next(request, context)
    }

    func check(_ request: HTTPRequest) throws(HTTPError) {
        guard !Self.isApplePath(request.path) else { return }
        let open = Self.open.contains { request.path.hasPrefix($0) }
        guard let host = request.header("Host"), allows(host: Self.bare(host)) else {
            throw HTTPError(
                status: 403, code: "forbidden_host",
                message: "the control plane answers only to its own host names (see --allow-host)")
        }
        if let origin = request.header("Origin") {
            guard let url = URL(string: origin), let originHost = url.host?.lowercased(),
                allowedHosts.contains(originHost) || allowedHosts.contains("[\(originHost)]"),
                ["http", "https"].contains(url.scheme?.lowercased() ?? "")
            else {
                throw HTTPError(
                    status: 403, code: "forbidden_origin", message: "requests from other origins are refused")
            }
            let bound = port.load(ordering: .acquiring)
            if bound != 0, (url.port ?? (url.scheme == "https" ? 443 : 80)) != bound {
                throw HTTPError(
                    status: 403, code: "forbidden_origin", message: "requests from other origins are refused")
            }
        }
        if !["GET", "HEAD", "OPTIONS"].contains(request.method), !open {
            let type = request.header("Content-Type")?.split(separator: ";").first?
                .trimmingCharacters(in: .whitespaces).lowercased()
            guard type == "application/json" else {
                throw HTTPError(
                    status: 415, code: "unsupported_media_type",
                    message: "state-changing requests must be Content-Type: application/json")
            }
        }
        if !open, !login.isSignedIn(request) {
            throw login.refusal(request, page: !request.path.hasPrefix("/_emulator/"), secretName: "token")
        }
    }

    /// Whether a host name (without port) is one the control plane answers to; lower-cased only when it
    /// has capitals.
    private func allows(host: String) -> Bool {
        allowedHosts.contains(host)
            || (host.utf8.contains { $0 >= 0x41 && $0 <= 0x5A } && allowedHosts.contains(host.lowercased()))
    }

    /// Whether a (canonical) path is one of Apple's endpoints, which the guard leaves alone.
    static func isApplePath(_ path: String) -> Bool {
        applePaths.contains(path) || applePrefixes.contains { path.hasPrefix($0) }
    }

    /// Bodies by who may send them: a receipt to Apple's `verifyReceipt` (a long purchase history is a few
    /// hundred KB), Apple's Server API requests (small JSON), the dashboard's forms; the control plane takes
    /// the server's whole limit only from a caller with the token (or when there is none).
    public func bodyLimit(method: String, path: String, authorization: String?) -> Int? {
        if Self.applePaths.contains(path) { return 256 << 10 }
        // Retention Messaging images are PNG files: as large as the server takes.
        if path.hasPrefix("/inApps/v1/messaging/image/") || path.hasPrefix("/sandbox/inApps/v1/messaging/image/") {
            return nil
        }
        if Self.applePrefixes.contains(where: { path.hasPrefix($0) }) { return 64 << 10 }
        guard path.hasPrefix("/_emulator/") else { return 16 << 10 }
        return login.isSignedIn(authorization: authorization) ? nil : 16 << 10
    }

    /// A host header or name without its port: `[::1]:8080` → `[::1]`, `localhost:80` → `localhost`.
    static func bare(_ host: String) -> String {
        if host.hasPrefix("[") {
            guard let end = host.firstIndex(of: "]") else { return host }
            return String(host[...end])
        }
        let utf8 = host.utf8
        guard let colon = utf8.firstIndex(of: 0x3A), !utf8[utf8.index(after: colon)...].contains(0x3A) else {
            return host
        }
        return String(host[..<colon])
    }

    /// Whether an address is a loopback one (binding it exposes nothing beyond this machine).
    public static func isLoopback(_ host: String) -> Bool { HTTPAddress.isLoopback(host) }
}
