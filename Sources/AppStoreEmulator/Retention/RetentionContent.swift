import AppStoreServerAPI
import Foundation
import StoreModel
import StorekeeperJSON

/// Apple's Retention Messaging limits (the Upload Message and Upload Image pages, the realtime endpoint's
/// set-up page).
public enum RetentionLimits {
    static let header = 66
    static let body = 144
    static let altText = 150
    static let bulletPoints = 5
    static let bulletPointText = 66
    static let messages = 2000
    static let images = 2000
    static let realtimeURL = 256
    /// How long the App Store waits for the realtime answer (700 ms in production).
    public static let realtimeTimeout: Duration = .milliseconds(700)
    /// An answer larger than this is not a retention answer.
    static let realtimeAnswerBytes = 16 << 10
    /// Realtime requests kept per subscription for the control plane and the dashboard.
    static let requestsShown = 50
}

/// `imageSize`: a full-size image (3840 wide, 160 to 2160 high) or a bullet point's (1024 square).
enum RetentionImageSize: String, CaseIterable {
    case fullSize = "FULL_SIZE"
    case bulletPoint = "BULLET_POINT"
}

/// `messageState` and `imageState`: a new upload waits for App Review (in the sandbox it is approved at once).
enum RetentionReviewState: String, CaseIterable {
    case pending = "PENDING"
    case approved = "APPROVED"
    case rejected = "REJECTED"
}

/// A Retention Messaging identifier: a UUID, kept in lower case.
enum RetentionID {
    static func parse(_ text: String, invalid code: APIErrorCode = .generalBadRequest, what: String) throws -> String {
        guard text.utf8.count == 36, let uuid = UUID(uuidString: text) else {
            throw EmulatorError.api(code, "Invalid \(what).")
        }
        return uuid.uuidString.lowercased()
    }
}

/// The facts of a PNG the Upload Image endpoint checks: its size and whether it can be transparent.
struct PNGFacts: Equatable {
    var width: Int
    var height: Int
    var hasAlpha: Bool

    /// Reads the chunk layout (signature, IHDR first, IEND last, at least one IDAT; every chunk inside the
    /// bytes); nil when it is not one. Pixel data is not decoded.
    init?(_ bytes: [UInt8]) {
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        guard bytes.count >= 8 + 25 + 12, Array(bytes[0..<8]) == signature else { return nil }
        func uint32(_ at: Int) -> Int {
            Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
        }
        var offset = 8
        var first = true
        var sawData = false
        var ended = false
        var facts: (Int, Int, Bool)?
        var chunks = 0
        while offset < bytes.count {
            chunks += 1
            guard !ended, chunks <= 10_000, offset + 12 <= bytes.count else { return nil }
            let length = uint32(offset)
            let type = String(decoding: bytes[(offset + 4)..<(offset + 8)], as: UTF8.self)
            guard length <= bytes.count - offset - 12 else { return nil }
            let data = offset + 8
            switch type {
            case "IHDR":
                guard first, length == 13 else { return nil }
                let colorType = bytes[data + 9]
                facts = (uint32(data), uint32(data + 4), colorType == 4 || colorType == 6)
            case "tRNS": facts?.2 = true
            case "IDAT": sawData = true
            case "IEND": ended = true
            default: break
            }
            guard !first || type == "IHDR" else { return nil }
            first = false
            offset = data + length + 4
        }
        guard ended, sawData, let (width, height, alpha) = facts, width > 0, height > 0 else { return nil }
        self.width = width
        self.height = height
        self.hasAlpha = alpha
    }

    func fits(_ size: RetentionImageSize) -> Bool {
        switch size {
        case .fullSize: width == 3840 && (160...2160).contains(height)
        case .bulletPoint: width == 1024 && height == 1024
        }
    }
}

/// A retention message as Upload Message takes it (`UploadMessageRequestBody`), checked with Apple's codes.
struct RetentionMessage: Sendable, Hashable {
    struct Image: Sendable, Hashable {
        var id: String
        var altText: String
    }

    struct BulletPoint: Sendable, Hashable {
        var text: String
        var image: Image
    }

    var header: String
    var body: String
    var image: Image?
    var headerPosition: String?
    var bulletPoints: [BulletPoint]

    /// Every image the message shows.
    var imageIDs: [String] { (image.map { [$0.id] } ?? []) + bulletPoints.map(\.image.id) }

    init(json: JSONObject) throws {
        let known: Set<String> = ["header", "body", "image", "headerPosition", "bulletPoints"]
        guard json.members.allSatisfy({ known.contains($0.key) }) else {
            throw EmulatorError.api(.generalBadRequest, "Invalid request: unknown member.")
        }
        func text(_ value: JSONValue?, _ name: String) throws -> String {
            guard let text = value?.stringValue else {
                throw EmulatorError.api(.generalBadRequest, "Invalid request: '\(name)' is required.")
            }
            return text
        }
        func parseImage(_ value: JSONValue?) throws -> Image? {
            guard let value, value != .null else { return nil }
            guard let object = value.objectValue else {
                throw EmulatorError.api(.generalBadRequest, "Invalid request: an image is an object.")
            }
            let alt = try text(object["altText"], "altText")
            guard alt.count <= RetentionLimits.altText else {
                throw EmulatorError.api(.altTextTooLong, "Alt text too long.")
            }
            return Image(
                id: try RetentionID.parse(try text(object["imageIdentifier"], "imageIdentifier"), what: "image id"),
                altText: alt)
        }
        header = try text(json["header"], "header")
        body = try text(json["body"], "body")
        guard header.count <= RetentionLimits.header else {
            throw EmulatorError.api(.headerTooLong, "Header too long.")
        }
        guard body.count <= RetentionLimits.body else { throw EmulatorError.api(.bodyTooLong, "Body too long.") }
        image = try parseImage(json["image"])
        switch json["headerPosition"] {
        case nil, .null: headerPosition = nil
        case .string("ABOVE_BODY"): headerPosition = "ABOVE_BODY"
        case .string("ABOVE_IMAGE"): headerPosition = "ABOVE_IMAGE"
        default: throw EmulatorError.api(.generalBadRequest, "Invalid header position.")
        }
        if headerPosition == "ABOVE_IMAGE", image == nil {
            throw EmulatorError.api(.aboveImageRequiresAnImage, "ABOVE_IMAGE requires an image.")
        }
        var points: [BulletPoint] = []
        switch json["bulletPoints"] {
        case nil, .null: break
        case .array(let items):
            guard items.count <= RetentionLimits.bulletPoints else {
                throw EmulatorError.api(.tooManyBulletPoints, "Too many bullet points.")
            }
            for item in items {
                guard let object = item.objectValue else {
                    throw EmulatorError.api(.generalBadRequest, "Invalid request: a bullet point is an object.")
                }
                let pointText = try text(object["text"], "text")
                guard pointText.count <= RetentionLimits.bulletPointText else {
                    throw EmulatorError.api(.bulletPointTextTooLong, "Bullet point text too long.")
                }
                guard let pointImage = try parseImage(item) else {
                    throw EmulatorError.api(.generalBadRequest, "Invalid request: a bullet point needs an image.")
                }
                points.append(BulletPoint(text: pointText, image: pointImage))
            }
        default: throw EmulatorError.api(.generalBadRequest, "Invalid request: bulletPoints is an array.")
        }
        bulletPoints = points
    }

    var json: JSONObject {
        var object: JSONObject = ["header": .string(header), "body": .string(body)]
        if let image {
            object["image"] = .object(["imageIdentifier": .string(image.id), "altText": .string(image.altText)])
        }
        if let headerPosition { object["headerPosition"] = .string(headerPosition) }
        if !bulletPoints.isEmpty {
            object["bulletPoints"] = .array(
                bulletPoints.map {
                    .object([
                        "text": .string($0.text), "imageIdentifier": .string($0.image.id),
                        "altText": .string($0.image.altText),
                    ])
                })
        }
        return object
    }
}

/// A locale as Apple's paths name it: `en-US`, `fr`, `zh-Hans-CN` (BCP 47 letters and hyphens).
enum RetentionLocale {
    static func parse(_ text: String) throws -> String {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard (2...35).contains(text.utf8.count), let language = parts.first, (2...3).contains(language.count),
            language.allSatisfy({ $0.isASCII && $0.isLetter }),
            parts.dropFirst().allSatisfy({
                (2...8).contains($0.count) && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
            })
        else { throw EmulatorError.api(.invalidLocale, "Invalid locale.") }
        return text
    }
}
