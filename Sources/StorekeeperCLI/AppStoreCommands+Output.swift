import AppStoreEmulator
import AppStoreReceipts
import Foundation
import StoreKitCatalog
import StoreTime
import StorekeeperCommandLine
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperLogging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What the emulator's client commands print for people: answers with ISO dates and JWS shortened (`--json` for all,
/// `--field` for one member), the product table, the clock's summary.
extension AppStoreCommands {
    /// `appstore products` for people: a line per product (id, kind, price, period, group and level), and a
    /// line per offer or billing plan below it.
    static func productTable(_ response: JSONValue) -> String {
        let products = response["products"]?.arrayValue ?? []
        let width = min(48, products.compactMap { $0["productId"]?.stringValue?.count }.max() ?? 0)
        var text = ""
        for product in products {
            let id = product["productId"]?.stringValue ?? "?"
            var columns = [
                id.padding(toLength: max(width, id.count), withPad: " ", startingAt: 0),
                (product["type"]?.stringValue ?? "").padding(toLength: 27, withPad: " ", startingAt: 0),
                (product["displayPrice"]?.stringValue ?? "").padding(toLength: 7, withPad: " ", startingAt: 0),
            ]
            if let period = product["subscriptionPeriod"]?.stringValue {
                columns.append("every \(period)")
                if let group = product["subscriptionGroupId"]?.stringValue {
                    columns.append("group \(group) level \(product["groupLevel"]?.int64Value.map(String.init) ?? "?")")
                }
            }
            text += columns.joined(separator: "  ").trimmingCharacters(in: .whitespaces) + "\n"
            var offers = product["introductoryOffer"].map { [$0] } ?? []
            for key in ["promotionalOffers", "winBackOffers", "offerCodes"] {
                offers += product[key]?.arrayValue ?? []
            }
            for offer in offers where offer != .null {
                let type = offer["type"]?.stringValue ?? "offer"
                let name = offer["id"]?.stringValue ?? offer["referenceName"]?.stringValue
                let mode = offer["paymentMode"]?.stringValue ?? "?"
                let price = mode == "freeTrial" ? "free" : (offer["displayPrice"]?.stringValue ?? "?")
                let periods = offer["periodCount"]?.int64Value ?? 1
                text +=
                    "    \(type) offer\(name.map { " '\($0)'" } ?? ""): \(mode), \(price) for \(periods) × "
                    + "\(offer["period"]?.stringValue ?? "?")\n"
            }
            for plan in product["billingPlans"]?.arrayValue ?? [] {
                text +=
                    "    billing plan \(plan["billingPlanType"]?.stringValue ?? "?"): "
                    + "\(plan["displayPrice"]?.stringValue ?? "?") a month for \(plan["totalBillingPeriods"]?.int64Value ?? 12) months"
                    + (plan["commitmentDisplayPrice"]?.stringValue.map { " (\($0) in all)" } ?? "") + "\n"
            }
        }
        let invalid = response["invalidProductIdentifiers"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if !invalid.isEmpty { text += "not sold: \(invalid.joined(separator: ", "))\n" }
        if products.isEmpty { text += "no products\n" }
        return text
    }

    /// One line for people: the new store date, the rate, and what the move made happen.
    static func advanceSummary(_ response: JSONValue, by period: String?) -> String {
        let date = response["now"]?.int64Value.map { ISODates.string(milliseconds: $0) } ?? "unknown"
        let rate = response["rate"]?.stringValue ?? "unknown"
        let renewals = response["ran"]?["renewals"]?.int64Value ?? 0
        let expirations = response["ran"]?["expirations"]?.int64Value ?? 0
        var line =
            "store time is now \(date) (rate \(rate)); ran \(renewals) renewal\(renewals == 1 ? "" : "s") and "
            + "\(expirations) expiration\(expirations == 1 ? "" : "s")"
        if response["caughtUp"] == .bool(false) { line += "; more fell due and runs in the background" }
        if let period, rate != "realTime", Notes.firstTime("compressed-periods-\(rate)") {
            line +=
                "\nnote: \(period) was measured at rate \(rate), which compresses subscription periods "
                + "(said once per rate)"
        }
        return line + "\n"
    }

    /// `--bundle-id`, else `$STOREKEEPER_BUNDLE_ID`, else the built-in catalogue's app.

    /// The answer for people: pretty JSON with ISO dates in which each JWS is shortened to its size and the
    /// `--field` path that prints it; the whole answer with `--json`; or only the member `--field` names
    /// (strings unquoted, so that `$(…)` in a shell gets the bare value).
    static func printAnswer(_ response: JSONValue, _ arguments: Arguments, _ console: Console) throws {
        let annotated = ISODates.annotated(response)
        guard let field = arguments.value("field") else {
            guard response != .null else { return }
            let shown = arguments.flag("json") ? annotated : shortened(annotated)
            console.write(JSONWriter.string(shown, pretty: true) + "\n")
            return
        }
        var value: JSONValue? = annotated
        for name in field.split(separator: ".") {
            if let items = value?.arrayValue, let index = Int(name) {
                value = items.indices.contains(index) ? items[index] : nil
            } else {
                value = value?[String(name)]
            }
        }
        guard let value else {
            let members = annotated.objectValue?.keys.joined(separator: ", ") ?? "none"
            throw CommandError.runtime("the answer has no member '\(field)' (its members: \(members))")
        }
        console.write((value.stringValue ?? JSONWriter.string(value, pretty: false)) + "\n")
    }

    /// `value` with every JWS (a long string of three base64url parts) replaced by a note of its size and the
    /// `--field` path that prints it.
    static func shortened(_ value: JSONValue, path: [String] = []) -> JSONValue {
        switch value {
        case .string(let text) where isJWS(text):
            let where_ = path.isEmpty ? "--json" : "--field \(path.joined(separator: "."))"
            return .string("<JWS, \(text.utf8.count) bytes: \(where_)>")
        case .array(let items):
            return .array(items.enumerated().map { shortened($0.element, path: path + [String($0.offset)]) })
        case .object(let object):
            var result = JSONObject()
            for member in object.members { result[member.key] = shortened(member.value, path: path + [member.key]) }
            return .object(result)
        default: return value
        }
    }

    static func isJWS(_ text: String) -> Bool {
        guard text.utf8.count >= 200, text.hasPrefix("eyJ") else { return false }
        var dots = 0
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "."): dots += 1
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                continue
            default: return false
            }
        }
        return dots == 2
    }

    /// The emulator's answer to a request, or a runtime error naming its refusal.
}
