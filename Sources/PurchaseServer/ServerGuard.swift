import StorekeeperDashboard
import StorekeeperHTTP

/// Deny by default: every path of the purchase server needs the secret key (`Authorization: Bearer`, or the
/// dashboard's session cookie under `/dashboard`) except the few that authenticate otherwise — Apple's
/// notifications and Retention Messaging requests (verified by their signature), the app's posts and its entitlements read (the app's public key,
/// checked by the route for the app it names), health and metrics, and the dashboard's sign-in form and assets. A route
/// added later is protected until it is named here. The responder has already refused non-canonical paths,
/// so this check and the router see the same path. A request signed in by a session cookie alone is answered
/// off the inline path, once the storage says the session was not signed out (in any process).
struct ServerGuard: InlineMiddleware {
    let login: DashboardLogin

    static let openPaths: Set<String> = [
        "/", "/healthz", "/metrics", "/v1/transactions", "/v1/app-transactions", "/v1/receipts", "/dashboard/login",
        "/dashboard/logout",
    ]
    static let openPrefixes = [
        "/v1/notifications/apple/", "/v1/apple/retention/", "/dashboard/assets/",
    ]

    static func isOpen(_ path: String) -> Bool {
        if openPaths.contains(path) || openPrefixes.contains(where: { path.hasPrefix($0) }) { return true }
        // The app's read of its user's entitlements: exactly one segment after the prefix, so that a route added
        // below it later is not open by accident.
        let rest = path.dropFirst(entitlementsPrefix.count)
        return path.hasPrefix(entitlementsPrefix) && !rest.isEmpty && !rest.contains("/")
    }

    static let entitlementsPrefix = "/v1/entitlements/"

    func check(_ request: HTTPRequest) throws(HTTPError) {
        guard !Self.isOpen(request.path), !login.isSignedIn(request) else { return }
        throw refusal(request)
    }

    func refusal(_ request: HTTPRequest) -> HTTPError {
        let page = request.path == login.root || request.path.hasPrefix(login.root + "/")
        return login.refusal(request, page: page, secretName: "secret key")
    }

    func handle(_ request: HTTPRequest, context: RequestContext, next: Handler) async throws -> HTTPResponse {
        if !Self.isOpen(request.path), login.needsSignOutCheck(request) {
            // A session cookie: also not signed out in another process (the storage is asked).
            guard await login.isSignedInEverywhere(request) else { throw refusal(request) }
        } else {
            try check(request)
        }
        return try await next(request, context)
    }

    func handleInline(
        _ request: HTTPRequest, context: RequestContext, next: (HTTPRequest, RequestContext) throws -> HTTPResponse?
    ) throws -> HTTPResponse? {
        // A session cookie is answered by the asynchronous path, which can ask the storage about sign-outs.
        if !Self.isOpen(request.path), login.needsSignOutCheck(request) { return nil }
        try check(request)
        return try next(request, context)
    }
}
