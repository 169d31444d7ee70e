public import Foundation
import StorekeeperCrypto
public import StorekeeperHTTP
import Synchronization

/// Signing in to a dashboard with a secret (the emulator's control-plane token, the server's secret key):
/// a form posts it once, and an HttpOnly, SameSite=Strict session cookie (`Secure` under HTTPS) stands in for
/// `Authorization: Bearer` on later requests. A session is a random id with an expiry, MACed with a key
/// derived from the secret (the cookie never holds the secret); signing out revokes that id until its expiry,
/// so the cookie no longer signs anyone in: in this process, and, given a ``DashboardSignOutStore``, in every
/// process sharing it and after a restart. Sessions last ``lifetime``.
public struct DashboardLogin: Sendable {
    /// Where the dashboard lives (`/dashboard`); the login form is `<root>/login`.
    public var root: String
    public var product: String
    public var assets: String
    /// Whether cookies are sent with `Secure` (the server speaks HTTPS).
    public var secureCookies: Bool
    private let key: [UInt8]?
    private let secret: [UInt8]?
    private let sessions: DashboardSessions
    private let signOuts: (any DashboardSignOutStore)?
    private let attempts = SignInAttempts()
    private let clock: @Sendable () -> Date

    /// The session cookie's name: each product its own (browsers send a host's cookies to every port on it,
    /// so two dashboards on one host would otherwise overwrite each other's), `__Host-` under HTTPS.
    public let cookieName: String
    /// How long a session lasts after signing in.
    public static let lifetime: TimeInterval = 12 * 3_600

    /// `secret` nil: nothing to sign in to (every request is signed in). `signOuts`: where sign-outs are kept
    /// beyond this process (nil: in its memory only).
    public init(
        root: String, product: String, assets: String, secret: String?, secureCookies: Bool = false,
        cookieName: String = "storekeeper_dashboard", signOuts: (any DashboardSignOutStore)? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.signOuts = signOuts
        self.cookieName = secureCookies ? "__Host-" + cookieName : cookieName
        self.root = root
        self.product = product
        self.assets = assets
        self.secureCookies = secureCookies
        self.secret = secret.map { Array($0.utf8) }
        self.clock = clock
        key = secret.map { HMAC.sha256(key: Array($0.utf8), message: Array("storekeeper dashboard session".utf8)) }
        sessions = DashboardSessions()
    }

    /// Whether an `Authorization` header carries the secret as a bearer token (or there is no secret).
    public func isSignedIn(authorization: String?) -> Bool {
        guard let secret else { return true }
        guard let header = authorization, header.hasPrefix("Bearer ") else { return false }
        return ConstantTime.equals(Array(header.utf8.dropFirst(7)), secret)
    }

    /// Whether the request carries the secret as a bearer token or a live session cookie.
    public func isSignedIn(_ request: HTTPRequest) -> Bool {
        guard secret != nil else { return true }
        if isSignedIn(authorization: request.header("Authorization")) { return true }
        return session(in: request) != nil
    }

    /// Whether ``isSignedInEverywhere(_:)`` must answer for the request (it may wait for the store): it
    /// signs in with a session cookie alone, and sign-outs are kept beyond this process.
    public func needsSignOutCheck(_ request: HTTPRequest) -> Bool {
        guard secret != nil, signOuts != nil, !isSignedIn(authorization: request.header("Authorization")) else {
            return false
        }
        return session(in: request) != nil
    }

    /// ``isSignedIn(_:)``, with a session cookie also not signed out in another process or before a restart
    /// (asked of the ``DashboardSignOutStore``; refused when it cannot answer).
    public func isSignedInEverywhere(_ request: HTTPRequest) async -> Bool {
        guard secret != nil else { return true }
        if isSignedIn(authorization: request.header("Authorization")) { return true }
        guard let session = session(in: request) else { return false }
        guard let signOuts else { return true }
        do {
            guard try await signOuts.isSignedOut(session.id) else { return true }
            sessions.revoke(session.id, until: session.expiry, now: clock().timeIntervalSince1970)
            return false
        } catch {
            return false
        }
    }

    /// The session a request's cookie names, when its MAC holds, it has not expired and it was not revoked.
    private func session(in request: HTTPRequest) -> (id: String, expiry: Int64)? {
        guard let session = verifiedSession(in: request),
            !sessions.isRevoked(session.id, expiry: session.expiry)
        else { return nil }
        return session
    }

    /// The session a request's cookie names, when its MAC holds and it has not expired, revoked here or not.
    private func verifiedSession(in request: HTTPRequest) -> (id: String, expiry: Int64)? {
        guard let key, let cookie = Self.cookie(cookieName, in: request) else { return nil }
        let parts = cookie.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let expiry = Int64(parts[0]), parts[1].utf8.count == 32 else { return nil }
        let signed = Array("\(parts[0]).\(parts[1])".utf8)
        let mac = Array(Digest.hex(HMAC.sha256(key: key, message: signed)).utf8)
        guard ConstantTime.equals(Array(parts[2].utf8), mac) else { return nil }
        let now = clock().timeIntervalSince1970
        guard Double(expiry) > now else { return nil }
        return (String(parts[1]), expiry)
    }

    private func cookie(value: String, maxAge: Int?) -> String {
        var cookie = "\(cookieName)=\(value); Path=/; HttpOnly; SameSite=Strict"
        if let maxAge { cookie += "; Max-Age=\(maxAge)" }
        if secureCookies { cookie += "; Secure" }
        return cookie
    }

    /// Why a signed-out request is refused: a page read (`GET` where `page` says it is a dashboard page) is
    /// sent to the sign-in form (303); anything else is 401 with `WWW-Authenticate: Bearer`, `secretName`
    /// saying what to send.
    public func refusal(_ request: HTTPRequest, page: Bool, secretName: String) -> HTTPError {
        if page, request.method == "GET" {
            return HTTPError(
                status: 303, code: "sign_in", message: "sign in at \(root)/login",
                headers: ["Location": root + "/login"])
        }
        return HTTPError(
            status: 401, code: "unauthorized", message: "this route needs Authorization: Bearer <\(secretName)>",
            headers: ["WWW-Authenticate": "Bearer"])
    }

    /// The value of cookie `name` in the request's `Cookie` header.
    public static func cookie(_ name: String, in request: HTTPRequest) -> String? {
        guard let header = request.header("Cookie"), header.utf8.count <= 8_192 else { return nil }
        for pair in header.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name {
                return parts[1].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    /// Sends a signed-out reader of a page to the form.
    public var redirectToLogin: HTTPResponse {
        HTTPResponse(status: 303, headers: [("Location", root + "/login"), ("Cache-Control", "no-store")])
    }

    /// The form; `failed` says the last secret was wrong.
    public func form(failed: Bool = false, secretName: String) -> HTTPResponse {
        let message: HTML =
            failed ? "<p class=\"badge bad\" role=\"alert\">That \(secretName) is not the right one.</p>" : ""
        let body: HTML = """
            \(message)
            <form method="post" action="\(root)/login" id="login">
            <label>\(secretName) <input type="password" name="secret" autocomplete="current-password" required></label>
            <button type="submit">Sign in</button></form>
            """
        let page = Page(
            title: "Sign in", product: product, navigation: [], current: root + "/login", assets: assets, body: body)
        return HTTPResponse(status: failed ? 401 : 200, headers: Page.headers, body: page.bytes)
    }

    /// Checks a posted form (`secret=…`, form-encoded, at most 4 KiB): a new session's cookie and a redirect
    /// to `home` when right, the form again when not.
    public func signIn(_ request: HTTPRequest, home: String, secretName: String) -> HTTPResponse {
        guard let secret, let key else { return HTTPResponse(status: 303, headers: [("Location", home)]) }
        let (address, now) = (SignInAttempts.client(request), clock().timeIntervalSince1970)
        guard attempts.allowed(address, now: now) else {
            let error = HTTPError(
                status: 429, code: "too_many_attempts",
                message: "\(SignInAttempts.perMinute) wrong sign-ins from this address in a minute: try again later")
            var response = error.response
            response.headers.append(("Retry-After", "60"))
            return response
        }
        guard request.body.count <= 4_096,
            let query = HTTPQuery(encoded: Substring(decoding: request.body, as: UTF8.self)),
            let given = query["secret"], ConstantTime.equals(Array(given.utf8), secret),
            let random = try? SecureRandom.bytes(16)
        else {
            attempts.failed(address, now: now)
            return form(failed: true, secretName: secretName)
        }
        let expiry = Int64(clock().timeIntervalSince1970 + Self.lifetime)
        let signed = "\(expiry).\(Digest.hex(random))"
        let value = signed + "." + Digest.hex(HMAC.sha256(key: key, message: Array(signed.utf8)))
        return HTTPResponse(
            status: 303,
            headers: [
                ("Location", home), ("Set-Cookie", cookie(value: value, maxAge: Int(Self.lifetime))),
                ("Cache-Control", "no-store"),
            ])
    }

    /// Ends the request's session (its cookie signs no one in from now on) and clears the cookie.
    public func signOut(_ request: HTTPRequest) -> HTTPResponse {
        if let session = session(in: request) {
            sessions.revoke(session.id, until: session.expiry, now: clock().timeIntervalSince1970)
        }
        return HTTPResponse(
            status: 303,
            headers: [("Location", root + "/login"), ("Set-Cookie", cookie(value: "", maxAge: 0))])
    }

    /// ``signOut(_:)``, answered once the ``DashboardSignOutStore`` holds the sign-out (every process sharing it
    /// refuses the cookie from then on); 503 when it cannot be stored (the session then ended here only).
    public func signOutEverywhere(_ request: HTTPRequest) async -> HTTPResponse {
        // Revoked here or not: a sign-out whose storing failed (revoked here only) is stored when it is sent again.
        if let signOuts, let session = verifiedSession(in: request) {
            do {
                try await signOuts.signOut(session.id, until: session.expiry)
            } catch {
                sessions.revoke(session.id, until: session.expiry, now: clock().timeIntervalSince1970)
                return HTTPError(
                    status: 503, code: "unavailable",
                    message: "the sign-out could not be stored; it holds in this process only: try again"
                ).response
            }
        }
        return signOut(request)
    }

    /// A page as a response.
    public static func page(_ page: Page, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: Page.headers, body: page.bytes)
    }

    /// The stylesheet or script.
    public static func asset(_ name: String) -> HTTPResponse {
        guard let file = DashboardAssets.file(name) else {
            return HTTPResponse(status: 404, headers: [("Content-Type", "text/plain")], body: Array("not found".utf8))
        }
        return HTTPResponse(
            status: 200, headers: [("Content-Type", file.type), ("Cache-Control", "max-age=300")], body: file.body)
    }
}

/// Where dashboard sign-outs are kept so that every process sharing it, and the same one after a restart,
/// refuses a signed-out session's cookie (the purchase server's storage).
public protocol DashboardSignOutStore: Sendable {
    /// Whether the session with this id was signed out.
    func isSignedOut(_ session: String) async throws -> Bool
    /// Records the session signed out until `expiry` (seconds since 1970, when its cookie expires anyway);
    /// durable once it returns.
    func signOut(_ session: String, until expiry: Int64) async throws
}

/// Sessions signed out before their expiry, per process. Bounded: past ``capacity`` revoked ids, every
/// session issued so far is ended instead (a sign-in again is the cost), so the list cannot grow without end.
final class DashboardSessions: Sendable {
    static let capacity = 100_000
    private let state = Mutex<(revoked: [String: Int64], notBefore: Double)>(([:], 0))

    /// Whether a session (its id and expiry) was signed out, or issued before a sweep ended them all.
    func isRevoked(_ id: String, expiry: Int64) -> Bool {
        state.withLock { state in
            state.revoked[id] != nil || Double(expiry) - DashboardLogin.lifetime <= state.notBefore
        }
    }

    func revoke(_ id: String, until expiry: Int64, now: Double) {
        state.withLock { state in
            if state.revoked.count >= Self.capacity {
                state.revoked = state.revoked.filter { Double($0.value) > now }
                if state.revoked.count >= Self.capacity {
                    state.revoked = [:]
                    state.notBefore = now
                }
            }
            state.revoked[id] = expiry
        }
    }
}

/// Wrong sign-ins per client: at most ``perMinute`` in a minute, then the client is refused (429) until the
/// minute is over, so that a secret cannot be guessed at the server's speed. A client is its IPv4 address or
/// its IPv6 /64 (one host has a whole /64 to draw from); behind a proxy on the same machine, the address the
/// proxy saw (the last `X-Forwarded-For` entry, else `X-Real-IP`). At most ``capacity`` clients are counted
/// (those whose minute is over go first); past that every other client shares one count, so a flood of
/// addresses cannot make failures go uncounted. A forwarded address is only as true as the proxy makes it: the
/// proxy must append the client's address to `X-Forwarded-For` (nginx: `$proxy_add_x_forwarded_for`, as
/// docs/operations.md sets it), or a client names its own.
final class SignInAttempts: Sendable {
    static let perMinute = 10
    static let capacity = 10_000
    /// Where failures are counted when the table is full.
    static let overflow = "*"
    private let state = Mutex<[String: (start: Double, failures: Int)]>([:])

    /// The client a request counts against.
    static func client(_ request: HTTPRequest) -> String {
        var address = request.remoteAddress ?? ""
        if HTTPAddress.isLoopback(address) {
            let forwarded = request.header("X-Forwarded-For")?.split(separator: ",").last
                .map { $0.trimmingCharacters(in: .whitespaces) }
            if let proxied = forwarded ?? request.header("X-Real-IP")?.trimmingCharacters(in: .whitespaces),
                !proxied.isEmpty, proxied.utf8.count <= 64
            {
                address = proxied
            }
        }
        return prefix64(address) ?? address
    }

    /// An IPv6 address's first 64 bits (`2001:db8:1:2::/64`); nil for anything else.
    static func prefix64(_ address: String) -> String? {
        guard address.contains(":"), !address.contains("."), address.utf8.count <= 45 else { return nil }
        let halves = address.split(separator: "::", maxSplits: 1, omittingEmptySubsequences: false)
            .map { $0.split(separator: ":", omittingEmptySubsequences: false).filter { !$0.isEmpty } }
        var groups = halves[0]
        if halves.count == 2 {
            let missing = 8 - halves[0].count - halves[1].count
            guard missing >= 0 else { return nil }
            groups += Array(repeating: "0", count: missing) + halves[1]
        }
        guard groups.count == 8, groups.allSatisfy({ (1...4).contains($0.count) && $0.allSatisfy(\.isHexDigit) })
        else { return nil }
        return groups.prefix(4).map { String(Int($0, radix: 16) ?? 0, radix: 16) }.joined(separator: ":") + "::/64"
    }

    func allowed(_ address: String, now: Double) -> Bool {
        state.withLock { table in
            guard let entry = table[address] ?? (table.count >= Self.capacity ? table[Self.overflow] : nil) else {
                return true
            }
            return now - entry.start >= 60 || entry.failures < Self.perMinute
        }
    }

    func failed(_ address: String, now: Double) {
        state.withLock { table in
            var address = address
            if table[address] == nil, table.count >= Self.capacity {
                table = table.filter { now - $0.value.start < 60 }
                if table.count >= Self.capacity { address = Self.overflow }
            }
            var entry = table[address] ?? (now, 0)
            if now - entry.start >= 60 { entry = (now, 0) }
            entry.failures += 1
            table[address] = entry
        }
    }
}
