import Foundation
import StorekeeperCrypto
public import StorekeeperHTTP

/// Signing in to a dashboard with a secret (the emulator's control-plane token, the server's secret key):
/// a form posts it once, and an HttpOnly, SameSite=Strict cookie derived from it (HMAC-SHA256, so the
/// cookie never holds the secret) stands in for `Authorization: Bearer` on later requests.
public struct DashboardLogin: Sendable {
    /// Where the dashboard lives (`/dashboard`); the login form is `<root>/login`.
    public var root: String
    public var product: String
    public var assets: String
    private let session: [UInt8]?
    private let secret: [UInt8]?

    public static let cookieName = "storekeeper_dashboard"

    /// `secret` nil: nothing to sign in to (every request is signed in).
    public init(root: String, product: String, assets: String, secret: String?) {
        self.root = root
        self.product = product
        self.assets = assets
        self.secret = secret.map { Array($0.utf8) }
        session = secret.map {
            Array(
                Digest.hex(HMAC.sha256(key: Array($0.utf8), message: Array("storekeeper dashboard session".utf8))).utf8)
        }
    }

    /// Whether an `Authorization` header carries the secret as a bearer token (or there is no secret).
    public func isSignedIn(authorization: String?) -> Bool {
        guard let secret else { return true }
        guard let header = authorization, header.hasPrefix("Bearer ") else { return false }
        return ConstantTime.equals(Array(header.utf8.dropFirst(7)), secret)
    }

    /// Whether the request carries the secret as a bearer token or the session cookie.
    public func isSignedIn(_ request: HTTPRequest) -> Bool {
        guard let secret, let session else { return true }
        if let header = request.header("Authorization"), header.hasPrefix("Bearer "),
            ConstantTime.equals(Array(header.utf8.dropFirst(7)), secret)
        {
            return true
        }
        guard let cookie = Self.cookie(Self.cookieName, in: request) else { return false }
        return ConstantTime.equals(Array(cookie.utf8), session)
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

    /// Checks a posted form (`secret=…`, form-encoded, at most 4 KiB): the session cookie and a redirect to
    /// `home` when right, the form again when not.
    public func signIn(_ request: HTTPRequest, home: String, secretName: String) -> HTTPResponse {
        guard let secret, let session else { return HTTPResponse(status: 303, headers: [("Location", home)]) }
        guard request.body.count <= 4_096,
            let query = HTTPQuery(encoded: Substring(decoding: request.body, as: UTF8.self)),
            let given = query["secret"], ConstantTime.equals(Array(given.utf8), secret)
        else { return form(failed: true, secretName: secretName) }
        let cookie =
            "\(Self.cookieName)=\(String(decoding: session, as: UTF8.self)); Path=/; HttpOnly; SameSite=Strict"
        return HTTPResponse(
            status: 303, headers: [("Location", home), ("Set-Cookie", cookie), ("Cache-Control", "no-store")])
    }

    /// Clears the cookie.
    public func signOut() -> HTTPResponse {
        HTTPResponse(
            status: 303,
            headers: [
                ("Location", root + "/login"),
                ("Set-Cookie", "\(Self.cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
            ])
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
