public import Foundation
public import StorekeeperJSON

/// Upload Message's body (`UploadMessageRequestBody`): a header of at most 66 characters, a body of at most
/// 144, an optional full-size image and up to five bullet points, each with a bullet-point image.
public struct RetentionMessageRequest: Sendable, Hashable {
    public struct Image: Sendable, Hashable {
        public var imageIdentifier: UUID
        public var altText: String
        public init(imageIdentifier: UUID, altText: String) {
            self.imageIdentifier = imageIdentifier
            self.altText = altText
        }
    }

    public struct BulletPoint: Sendable, Hashable {
        public var text: String
        public var image: Image
        public init(text: String, image: Image) {
            self.text = text
            self.image = image
        }
    }

    public var header: String
    public var body: String
    public var image: Image?
    /// `ABOVE_BODY` (Apple's default) or `ABOVE_IMAGE`.
    public var headerPosition: String?
    public var bulletPoints: [BulletPoint]

    public init(
        header: String, body: String, image: Image? = nil, headerPosition: String? = nil,
        bulletPoints: [BulletPoint] = []
    ) {
        self.header = header
        self.body = body
        self.image = image
        self.headerPosition = headerPosition
        self.bulletPoints = bulletPoints
    }

    public var json: JSONObject {
        func id(_ uuid: UUID) -> JSONValue { .string(uuid.uuidString.lowercased()) }
        var object: JSONObject = ["header": .string(header), "body": .string(body)]
        if let image {
            object["image"] = .object(["imageIdentifier": id(image.imageIdentifier), "altText": .string(image.altText)])
        }
        if let headerPosition { object["headerPosition"] = .string(headerPosition) }
        if !bulletPoints.isEmpty {
            object["bulletPoints"] = .array(
                bulletPoints.map {
                    .object([
                        "text": .string($0.text), "imageIdentifier": id($0.image.imageIdentifier),
                        "altText": .string($0.image.altText),
                    ])
                })
        }
        return object
    }
}

/// Get Image List: each image's identifier, review state and size.
public struct RetentionImageListResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var images: [(identifier: String, state: String, size: String?)] {
        (json["imageIdentifiers"]?.arrayValue ?? []).compactMap { item in
            guard let id = item["imageIdentifier"]?.stringValue else { return nil }
            return (id, item["imageState"]?.stringValue ?? "", item["imageSize"]?.stringValue)
        }
    }
}

/// Get Message List: each message's identifier and review state.
public struct RetentionMessageListResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var messages: [(identifier: String, state: String)] {
        (json["messageIdentifiers"]?.arrayValue ?? []).compactMap { item in
            guard let id = item["messageIdentifier"]?.stringValue else { return nil }
            return (id, item["messageState"]?.stringValue ?? "")
        }
    }
}

/// Initiate Performance Test: the test's configuration and its request id.
public struct PerformanceTestResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var requestID: String? { string("requestId") }
    public var config: JSONObject { json["config"]?.objectValue ?? [:] }
}

/// Get Performance Test Results: `PENDING`, `PASS` or `FAIL`, the success rate, response times and failures.
public struct PerformanceTestResultResponse: APIResponseBody {
    public let json: JSONObject
    public init(json: JSONObject) { self.json = json }
    public var result: String? { string("result") }
    public var successRate: Int64? { int64("successRate") }
    public var target: String? { string("target") }
    public var numPending: Int64? { int64("numPending") }
    public var responseTimes: JSONObject { json["responseTimes"]?.objectValue ?? [:] }
    public var failures: JSONObject { json["failures"]?.objectValue ?? [:] }
}

/// The Retention Messaging API (same host, keys and errors as the App Store Server API).
extension AppStoreServerAPIClient {
    private static func id(_ uuid: UUID) -> String { uuid.uuidString.lowercased() }

    /// Upload Image: a PNG without transparency, full size (3840 wide, 160–2160 high) or a bullet point's
    /// (1024 square).
    public func uploadImage(_ identifier: UUID, png: [UInt8], size: String? = nil)
        async throws(AppStoreServerAPIError)
    {
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v1/messaging/image/\(Self.id(identifier))", query: size.map { [("imageSize", $0)] } ?? [],
            rawBody: png, contentType: "image/png", idempotent: false)
    }

    public func deleteImage(_ identifier: UUID) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call("DELETE", "/inApps/v1/messaging/image/\(Self.id(identifier))")
    }

    public func imageList() async throws(AppStoreServerAPIError) -> RetentionImageListResponse {
        try await call("GET", "/inApps/v1/messaging/image/list")
    }

    public func uploadMessage(_ identifier: UUID, _ message: RetentionMessageRequest)
        async throws(AppStoreServerAPIError)
    {
        // Not idempotent at Apple (a second upload is a 409): not sent again after a transport error.
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v1/messaging/message/\(Self.id(identifier))",
            rawBody: JSONWriter.bytes(.object(message.json)),
            contentType: "application/json", idempotent: false)
    }

    public func deleteMessage(_ identifier: UUID) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call("DELETE", "/inApps/v1/messaging/message/\(Self.id(identifier))")
    }

    public func messageList() async throws(AppStoreServerAPIError) -> RetentionMessageListResponse {
        try await call("GET", "/inApps/v1/messaging/message/list")
    }

    /// Configure Default Message: the approved message shown for `productID` in `locale` when the realtime
    /// answer fails.
    public func configureDefaultMessage(productID: String, locale: String, messageIdentifier: UUID)
        async throws(AppStoreServerAPIError)
    {
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v1/messaging/default/\(Self.encode(productID))/\(Self.encode(locale))",
            body: ["messageIdentifier": .string(Self.id(messageIdentifier))])
    }

    /// Get Default Message: the message's identifier.
    public func defaultMessage(productID: String, locale: String) async throws(AppStoreServerAPIError) -> String? {
        let answer: EmptyResponse = try await call(
            "GET", "/inApps/v1/messaging/default/\(Self.encode(productID))/\(Self.encode(locale))")
        return answer.string("messageIdentifier")
    }

    public func deleteDefaultMessage(productID: String, locale: String) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call(
            "DELETE", "/inApps/v1/messaging/default/\(Self.encode(productID))/\(Self.encode(locale))")
    }

    /// Configure Realtime URL: where the App Store asks which retention message to show (`https://`).
    public func configureRealtimeURL(_ url: String) async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call(
            "PUT", "/inApps/v1/messaging/realtime/url", body: ["realtimeURL": .string(url)])
    }

    public func realtimeURL() async throws(AppStoreServerAPIError) -> String? {
        let answer: EmptyResponse = try await call("GET", "/inApps/v1/messaging/realtime/url")
        return answer.string("realtimeURL")
    }

    public func deleteRealtimeURL() async throws(AppStoreServerAPIError) {
        let _: EmptyResponse = try await call("DELETE", "/inApps/v1/messaging/realtime/url")
    }

    /// Initiate Performance Test: the App Store calls the sandbox realtime URL with requests about
    /// `originalTransactionID` (a sandbox subscription) and measures the answers.
    public func initiatePerformanceTest(originalTransactionID: String) async throws(AppStoreServerAPIError)
        -> PerformanceTestResponse
    {
        try await call(
            "POST", "/inApps/v1/messaging/performanceTest",
            body: ["originalTransactionId": .string(originalTransactionID)])
    }

    public func performanceTestResult(_ requestID: String) async throws(AppStoreServerAPIError)
        -> PerformanceTestResultResponse
    {
        try await call("GET", "/inApps/v1/messaging/performanceTest/result/\(Self.encode(requestID))")
    }
}
