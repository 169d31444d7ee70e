public import Foundation
public import StoreModel
public import StoreTime
public import StorekeeperJSON

/// Where an app's server notifications go: `{"productionURL", "sandboxURL", "version": 1|2}` as in App
/// Store Connect, plus what Apple does not let you set: several URLs per environment (a string or an
/// array), the retry schedule in seconds of store time, the receiver's time limit and whether a 4xx answer
/// is retried.
public struct AppNotifications: Codable, Sendable, Hashable {
    public var productionURLs: [String]
    public var sandboxURLs: [String]
    public var version: Int
    /// Seconds after the previous attempt; nil for Apple's schedule (none in the sandbox).
    public var retrySchedule: [Double]?
    public var timeoutSeconds: Double
    public var retryClientErrors: Bool

    public init(
        productionURLs: [String] = [], sandboxURLs: [String] = [], version: Int = 2, retrySchedule: [Double]? = nil,
        timeoutSeconds: Double = 5, retryClientErrors: Bool = true
    ) {
        self.productionURLs = productionURLs
        self.sandboxURLs = sandboxURLs
        self.version = version
        self.retrySchedule = retrySchedule
        self.timeoutSeconds = timeoutSeconds
        self.retryClientErrors = retryClientErrors
    }

    static let allowed: Set<String> = [
        "productionURL", "sandboxURL", "version", "retrySchedule", "timeoutSeconds", "retryClientErrors",
    ]

    /// Reads the JSON object; every member is checked and bounded, and unknown ones are refused.
    public init(json: JSONValue) throws(EmulatorError) {
        guard let object = json.objectValue else { throw EmulatorError.invalid("notifications must be an object") }
        for key in object.keys where !Self.allowed.contains(key) {
            throw EmulatorError.invalid(
                "unknown member '\(key)' (allowed: \(Self.allowed.sorted().joined(separator: ", ")))")
        }
        func urls(_ name: String) throws(EmulatorError) -> [String] {
            let values: [JSONValue]
            switch object[name] {
            case nil, .null?: return []
            case .string(let url)?: values = [.string(url)]
            case .array(let items)?: values = items
            default: throw EmulatorError.invalid("member '\(name)' must be a URL or an array of URLs")
            }
            guard values.count <= 8 else { throw EmulatorError.invalid("member '\(name)' lists more than 8 URLs") }
            var result: [String] = []
            for value in values {
                guard let url = value.stringValue, url.utf8.count <= 2_048,
                    url.hasPrefix("http://") || url.hasPrefix("https://"), URL(string: url)?.host != nil
                else { throw EmulatorError.invalid("member '\(name)' must hold http(s) URLs") }
                result.append(url)
            }
            return result
        }
        productionURLs = try urls("productionURL")
        sandboxURLs = try urls("sandboxURL")
        switch object["version"] {
        case nil: version = 2
        case .integer(2)?: version = 2
        case .integer(1)?: version = 1
        default: throw EmulatorError.invalid("member 'version' must be 1 or 2")
        }
        switch object["retrySchedule"] {
        case nil, .null?: retrySchedule = nil
        case .array(let items)?:
            guard items.count <= 10 else {
                throw EmulatorError.invalid("member 'retrySchedule' has more than 10 delays")
            }
            var delays: [Double] = []
            for item in items {
                guard let seconds = item.doubleValue, seconds >= 0, seconds <= 31_536_000 else {
                    throw EmulatorError.invalid("member 'retrySchedule' holds delays in seconds, 0 to 31536000")
                }
                delays.append(seconds)
            }
            retrySchedule = delays
        default: throw EmulatorError.invalid("member 'retrySchedule' must be an array of seconds")
        }
        switch object["timeoutSeconds"] {
        case nil: timeoutSeconds = 5
        case let value?:
            guard let seconds = value.doubleValue, seconds > 0, seconds <= 60 else {
                throw EmulatorError.invalid(
                    "member 'timeoutSeconds' must be a number of seconds, above 0 and at most 60")
            }
            timeoutSeconds = seconds
        }
        switch object["retryClientErrors"] {
        case nil: retryClientErrors = true
        case .bool(let flag)?: retryClientErrors = flag
        default: throw EmulatorError.invalid("member 'retryClientErrors' must be a boolean")
        }
    }

    public var json: JSONValue {
        var object: JSONObject = [
            "productionURL": .array(productionURLs.map(JSONValue.string)),
            "sandboxURL": .array(sandboxURLs.map(JSONValue.string)), "version": .integer(Int64(version)),
            "timeoutSeconds": .double(timeoutSeconds), "retryClientErrors": .bool(retryClientErrors),
        ]
        object["retrySchedule"] = retrySchedule.map { .array($0.map(JSONValue.double)) } ?? .null
        return .object(object)
    }

    /// The delivery settings for `environment`, or nil when it has no URL. Apple's schedule is in hours,
    /// measured at the store's time rate from `now` like every other period; `retrySchedule` is in seconds
    /// of store time as given.
    public func settings(for environment: Environment, rate: TimeRate, now: Date) -> NotificationSettings? {
        let urls = environment == .production ? productionURLs : sandboxURLs
        guard !urls.isEmpty else { return nil }
        let delays =
            retrySchedule
            ?? NotificationSettings.appleRetryHours(version: version, environment: environment).map { hours in
                rate.end(of: StorePeriod(hours: hours), from: now).timeIntervalSince(now)
            }
        return NotificationSettings(
            urls: urls, version: version, retryDelays: delays,
            timeout: .milliseconds(max(1, Int64((timeoutSeconds * 1000).rounded()))),
            retryClientErrors: retryClientErrors)
    }
}
