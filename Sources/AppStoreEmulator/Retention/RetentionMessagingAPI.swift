import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperJSON

/// The Retention Messaging API (Apple's `/inApps/v1/messaging/…`): images and messages with their review
/// states, default messages per product and locale, the realtime URL, and performance tests of it. Each
/// app and environment has its own; in the sandbox uploads are approved at once, as Apple does, and in
/// production they wait for App Review (the control plane's review verb).
extension ServerAPIService {
    private func item(_ kind: RetentionItem.Kind, _ scope: APIScope, _ id: String, created: Date, state: String = "")
        -> RetentionItem
    {
        RetentionItem(
            kind: kind, bundleID: BundleID(scope.bundleID), environment: scope.environment, id: id, state: state,
            created: created)
    }

    /// The review state a new upload starts in.
    private static func initialState(_ scope: APIScope) -> RetentionReviewState {
        scope.environment == .sandbox ? .approved : .pending
    }

    // MARK: - Images

    func apiUploadImage(_ rawID: String, size: String?, bytes: [UInt8], scope: APIScope) async throws {
        _ = try apiApp(scope)
        let id = try RetentionID.parse(rawID, what: "image identifier")
        let imageSize: RetentionImageSize
        if let size {
            guard let parsed = RetentionImageSize(rawValue: size) else {
                throw EmulatorError.api(.generalBadRequest, "Invalid image size.")
            }
            imageSize = parsed
        } else {
            imageSize = .fullSize
        }
        guard let png = PNGFacts(bytes), !png.hasAlpha, png.fits(imageSize) else {
            throw EmulatorError.api(.invalidImage, "Invalid image.")
        }
        let now = appStore.now
        try await appStore.storage.write { store in
            let bundle = BundleID(scope.bundleID)
            guard try store.retentionItem(.image, bundle: bundle, environment: scope.environment, id: id) == nil else {
                throw EmulatorError.api(.imageAlreadyExists, "Image already exists.")
            }
            guard
                try store.retentionItems(
                    .image, bundle: bundle, environment: scope.environment, limit: RetentionLimits.images
                ).count < RetentionLimits.images
            else { throw EmulatorError.api(.maxImages, "Maximum number of images reached.") }
            var image = self.item(.image, scope, id, created: now, state: Self.initialState(scope).rawValue)
            image.document = JSONWriter.string(
                .object([
                    "imageSize": .string(imageSize.rawValue), "width": .integer(Int64(png.width)),
                    "height": .integer(Int64(png.height)), "bytes": .integer(Int64(bytes.count)),
                ]))
            try store.save(image)
        }
    }

    func apiDeleteImage(_ rawID: String, scope: APIScope) async throws {
        _ = try apiApp(scope)
        let id = try RetentionID.parse(rawID, what: "image identifier")
        try await appStore.storage.write { store in
            let bundle = BundleID(scope.bundleID)
            guard try store.retentionItem(.image, bundle: bundle, environment: scope.environment, id: id) != nil else {
                throw EmulatorError.api(.imageNotFound, "Image not found.")
            }
            let messages = try store.retentionItems(
                .message, bundle: bundle, environment: scope.environment, limit: RetentionLimits.messages)
            for message in messages {
                let content = try? RetentionMessage(json: message.object)
                if content?.imageIDs.contains(id) == true {
                    throw EmulatorError.api(.imageInUse, "Image in use by message \(message.id).")
                }
            }
            _ = try store.deleteRetentionItem(.image, bundle: bundle, environment: scope.environment, id: id)
        }
    }

    func apiImages(scope: APIScope) async throws -> [(id: String, state: String, size: String)] {
        _ = try apiApp(scope)
        return try await appStore.storage.read { store in
            try store.retentionItems(
                .image, bundle: BundleID(scope.bundleID), environment: scope.environment, limit: RetentionLimits.images
            ).map { ($0.id, $0.state, $0.object["imageSize"]?.stringValue ?? "FULL_SIZE") }
        }
    }

    // MARK: - Messages

    func apiUploadMessage(_ rawID: String, body: JSONObject, scope: APIScope) async throws {
        _ = try apiApp(scope)
        let id = try RetentionID.parse(rawID, what: "message identifier")
        let message = try RetentionMessage(json: body)
        let now = appStore.now
        try await appStore.storage.write { store in
            let bundle = BundleID(scope.bundleID)
            guard try store.retentionItem(.message, bundle: bundle, environment: scope.environment, id: id) == nil
            else { throw EmulatorError.api(.messageAlreadyExists, "Message already exists.") }
            guard
                try store.retentionItems(
                    .message, bundle: bundle, environment: scope.environment, limit: RetentionLimits.messages
                ).count < RetentionLimits.messages
            else { throw EmulatorError.api(.maxMessages, "Maximum number of messages reached.") }
            // The main image is full size and each bullet point's is a bullet-point image.
            let wanted =
                (message.image.map { [($0.id, RetentionImageSize.fullSize)] } ?? [])
                + message.bulletPoints.map { ($0.image.id, RetentionImageSize.bulletPoint) }
            for (imageID, size) in wanted {
                guard
                    let image = try store.retentionItem(
                        .image, bundle: bundle, environment: scope.environment, id: imageID)
                else { throw EmulatorError.api(.imageNotFound, "Image \(imageID) not found.") }
                guard image.object["imageSize"]?.stringValue == size.rawValue else {
                    throw EmulatorError.api(.badRequestImageSize, "Image \(imageID) is not a \(size.rawValue) image.")
                }
            }
            var stored = self.item(.message, scope, id, created: now, state: Self.initialState(scope).rawValue)
            stored.document = JSONWriter.string(.object(message.json))
            try store.save(stored)
        }
    }

    func apiDeleteMessage(_ rawID: String, scope: APIScope) async throws {
        _ = try apiApp(scope)
        let id = try RetentionID.parse(rawID, what: "message identifier")
        try await appStore.storage.write { store in
            guard
                try store.deleteRetentionItem(
                    .message, bundle: BundleID(scope.bundleID), environment: scope.environment, id: id)
            else { throw EmulatorError.api(.messageNotFound, "Message not found.") }
        }
    }

    func apiMessages(scope: APIScope) async throws -> [(id: String, state: String)] {
        _ = try apiApp(scope)
        return try await appStore.storage.read { store in
            try store.retentionItems(
                .message, bundle: BundleID(scope.bundleID), environment: scope.environment,
                limit: RetentionLimits.messages
            ).map { ($0.id, $0.state) }
        }
    }

    // MARK: - Default messages

    /// A product of the app's catalogue that is an auto-renewable subscription, and a locale, as the path
    /// names them.
    private func defaultKey(_ productID: String, _ locale: String) throws -> String {
        guard let entry = appStore.catalog.entry(productID), entry.kind == .autoRenewable else {
            throw EmulatorError.api(.invalidProductId, "Invalid product id.")
        }
        return entry.productID + "/" + (try RetentionLocale.parse(locale))
    }

    func apiConfigureDefault(productID: String, locale: String, body: JSONObject, scope: APIScope) async throws {
        _ = try apiApp(scope)
        let key = try defaultKey(productID, locale)
        guard let raw = body["messageIdentifier"]?.stringValue,
            body.members.allSatisfy({ $0.key == "messageIdentifier" })
        else { throw EmulatorError.api(.generalBadRequest, "Invalid request: messageIdentifier is required.") }
        let messageID = try RetentionID.parse(raw, what: "message identifier")
        let now = appStore.now
        try await appStore.storage.write { store in
            let bundle = BundleID(scope.bundleID)
            guard
                let message = try store.retentionItem(
                    .message, bundle: bundle, environment: scope.environment, id: messageID)
            else { throw EmulatorError.api(.messageNotFound, "Message not found.") }
            guard message.state == RetentionReviewState.approved.rawValue else {
                throw EmulatorError.api(.messageNotApproved, "Message not approved.")
            }
            for imageID in (try? RetentionMessage(json: message.object))?.imageIDs ?? [] {
                let image = try store.retentionItem(.image, bundle: bundle, environment: scope.environment, id: imageID)
                guard image?.state == RetentionReviewState.approved.rawValue else {
                    throw EmulatorError.api(.imageNotApproved, "Image not approved.")
                }
            }
            var item =
                try store.retentionItem(.defaultMessage, bundle: bundle, environment: scope.environment, id: key)
                ?? self.item(.defaultMessage, scope, key, created: now)
            item.document = JSONWriter.string(.object(["messageIdentifier": .string(messageID)]))
            try store.save(item)
        }
    }

    func apiDefaultMessage(productID: String, locale: String, scope: APIScope) async throws -> String {
        _ = try apiApp(scope)
        let key = try defaultKey(productID, locale)
        let item = try await appStore.storage.read { store in
            try store.retentionItem(
                .defaultMessage, bundle: BundleID(scope.bundleID), environment: scope.environment, id: key)
        }
        guard let item, let id = item.object["messageIdentifier"]?.stringValue else {
            throw EmulatorError.api(.defaultMessageNotFound, "Default message not found.")
        }
        return id
    }

    /// Idempotent, as Apple's: a product and locale without a default message are answered 200 too.
    func apiDeleteDefault(productID: String, locale: String, scope: APIScope) async throws {
        _ = try apiApp(scope)
        let key = try defaultKey(productID, locale)
        try await appStore.storage.write { store in
            _ = try store.deleteRetentionItem(
                .defaultMessage, bundle: BundleID(scope.bundleID), environment: scope.environment, id: key)
        }
    }

    // MARK: - Realtime URL

    /// Apple takes `https://` URLs of at most 256 characters; the emulator also takes `http://` to a
    /// loopback host, so that a server on this machine can answer without a certificate.
    static func checkRealtimeURL(_ text: String) throws -> String {
        guard text.utf8.count <= RetentionLimits.realtimeURL, let url = URL(string: text),
            let host = url.host, !host.isEmpty
        else { throw EmulatorError.api(.badRequestRealtimeUrl, "Invalid realtime URL.") }
        let loopback = ControlPlaneGuard.isLoopback(host.lowercased())
        guard url.scheme == "https" || (url.scheme == "http" && loopback) else {
            throw EmulatorError.api(.badRequestRealtimeUrl, "The realtime URL must use https.")
        }
        return text
    }

    func apiConfigureRealtimeURL(body: JSONObject, scope: APIScope) async throws {
        _ = try apiApp(scope)
        guard let raw = body["realtimeURL"]?.stringValue, body.members.allSatisfy({ $0.key == "realtimeURL" }) else {
            throw EmulatorError.api(.badRequestRealtimeUrl, "Invalid request: realtimeURL is required.")
        }
        let url = try Self.checkRealtimeURL(raw)
        let now = appStore.now
        try await appStore.storage.write { store in
            let bundle = BundleID(scope.bundleID)
            // Production takes a URL only once a performance test in the sandbox passed.
            if scope.environment == .production {
                let passed = try store.retentionItems(
                    .performanceTest, bundle: bundle, environment: .sandbox, limit: 1_000
                ).contains { $0.state == "PASS" }
                guard passed else {
                    throw EmulatorError.api(
                        .forbiddenNoPassingTest, "A performance test must pass before configuring production.")
                }
            }
            var item = self.item(.realtimeURL, scope, "", created: now)
            item.document = JSONWriter.string(.object(["realtimeURL": .string(url)]))
            try store.save(item)
        }
    }

    func realtimeURL(bundle: BundleID, environment: Environment, in store: any EmulatorStore) throws -> String? {
        try store.retentionItem(.realtimeURL, bundle: bundle, environment: environment, id: "").flatMap {
            $0.object["realtimeURL"]?.stringValue
        }
    }

    func apiRealtimeURL(scope: APIScope) async throws -> String {
        _ = try apiApp(scope)
        let url = try await appStore.storage.read { store in
            try self.realtimeURL(bundle: BundleID(scope.bundleID), environment: scope.environment, in: store)
        }
        guard let url else { throw EmulatorError.api(.realtimeUrlNotFound, "Realtime URL not found.") }
        return url
    }

    func apiDeleteRealtimeURL(scope: APIScope) async throws {
        _ = try apiApp(scope)
        try await appStore.storage.write { store in
            guard
                try store.deleteRetentionItem(
                    .realtimeURL, bundle: BundleID(scope.bundleID), environment: scope.environment, id: "")
            else { throw EmulatorError.api(.realtimeUrlNotFound, "Realtime URL not found.") }
        }
    }
}
