import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

extension ServerAPIService {
    /// The Retention Messaging API's endpoints (same host, tokens, limits and errors).
    func retentionMessagingRoutes() -> [(String, String, APIEndpointClass, APIHandler)] {
        let store = self
        @Sendable func body(_ request: HTTPRequest) throws -> JSONObject { try Self.jsonBody(request) }
        return [
            (
                "PUT", "/v1/messaging/image/{id}", .retentionMessaging,
                { @Sendable request, context, scope in
                    try await store.apiUploadImage(
                        try context.parameter("id"), size: request.query["imageSize"], bytes: request.body,
                        scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "DELETE", "/v1/messaging/image/{id}", .retentionMessaging,
                { @Sendable _, context, scope in
                    try await store.apiDeleteImage(try context.parameter("id"), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "GET", "/v1/messaging/image/list", .retentionMessaging,
                { @Sendable _, _, scope in
                    .json(
                        .object([
                            "imageIdentifiers": .array(
                                try await store.apiImages(scope: scope).map {
                                    .object([
                                        "imageIdentifier": .string($0.id), "imageState": .string($0.state),
                                        "imageSize": .string($0.size),
                                    ])
                                })
                        ]))
                }
            ),
            (
                "PUT", "/v1/messaging/message/{id}", .retentionMessaging,
                { @Sendable request, context, scope in
                    try await store.apiUploadMessage(try context.parameter("id"), body: body(request), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "DELETE", "/v1/messaging/message/{id}", .retentionMessaging,
                { @Sendable _, context, scope in
                    try await store.apiDeleteMessage(try context.parameter("id"), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "GET", "/v1/messaging/message/list", .retentionMessaging,
                { @Sendable _, _, scope in
                    .json(
                        .object([
                            "messageIdentifiers": .array(
                                try await store.apiMessages(scope: scope).map {
                                    .object(["messageIdentifier": .string($0.id), "messageState": .string($0.state)])
                                })
                        ]))
                }
            ),
            (
                "PUT", "/v1/messaging/default/{product}/{locale}", .retentionDefaultMessage,
                { @Sendable request, context, scope in
                    try await store.apiConfigureDefault(
                        productID: try context.parameter("product"), locale: try context.parameter("locale"),
                        body: body(request), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "GET", "/v1/messaging/default/{product}/{locale}", .retentionMessaging,
                { @Sendable _, context, scope in
                    .json(
                        .object([
                            "messageIdentifier": .string(
                                try await store.apiDefaultMessage(
                                    productID: try context.parameter("product"),
                                    locale: try context.parameter("locale"), scope: scope))
                        ]))
                }
            ),
            (
                "DELETE", "/v1/messaging/default/{product}/{locale}", .retentionMessaging,
                { @Sendable _, context, scope in
                    try await store.apiDeleteDefault(
                        productID: try context.parameter("product"), locale: try context.parameter("locale"),
                        scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "PUT", "/v1/messaging/realtime/url", .retentionMessaging,
                { @Sendable request, _, scope in
                    try await store.apiConfigureRealtimeURL(body: body(request), scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "GET", "/v1/messaging/realtime/url", .retentionMessaging,
                { @Sendable _, _, scope in
                    .json(.object(["realtimeURL": .string(try await store.apiRealtimeURL(scope: scope))]))
                }
            ),
            (
                "DELETE", "/v1/messaging/realtime/url", .retentionMessaging,
                { @Sendable _, _, scope in
                    try await store.apiDeleteRealtimeURL(scope: scope)
                    return HTTPResponse(status: 200)
                }
            ),
            (
                "POST", "/v1/messaging/performanceTest", .retentionMessaging,
                { @Sendable request, _, scope in
                    let (config, id) = try await store.apiInitiatePerformanceTest(body: body(request), scope: scope)
                    return .json(.object(["config": .object(config), "requestId": .string(id)]))
                }
            ),
            (
                "GET", "/v1/messaging/performanceTest/result/{id}", .retentionMessaging,
                { @Sendable _, context, scope in
                    .json(.object(try await store.apiPerformanceTestResult(try context.parameter("id"), scope: scope)))
                }
            ),
        ]
    }
}
