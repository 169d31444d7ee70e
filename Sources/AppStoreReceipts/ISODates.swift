import Foundation
import StoreModel
package import StorekeeperJSON

/// ISO 8601 beside epoch milliseconds in what the command line prints and the purchase server answers.
package enum ISODates {
    package static func string(milliseconds: Int64) -> String {
        ReceiptDate.rfc3339String(EpochMilliseconds.date(milliseconds) ?? .distantPast)
    }

    /// A copy of `value` in which every member that holds epoch milliseconds (a name ending in `Date`, `At`
    /// or equal to `now`, with a plausible value) gains an ISO 8601 sibling named `…ISO`.
    /// `names`: more members that hold epoch milliseconds whatever their suffix (the purchase server's `date`,
    /// `nextAttempt`, a chart point's `start` and `end`).
    /// `skipping`: members whose value is copied as it is (maps keyed by ids, such as the server's `balances`).
    package static func annotated(_ value: JSONValue, names: Set<String> = [], skipping: Set<String> = []) -> JSONValue
    {
        switch value {
        case .array(let items): return .array(items.map { annotated($0, names: names, skipping: skipping) })
        case .object(let object):
            var result = JSONObject()
            for member in object.members {
                if skipping.contains(member.key) {
                    result[member.key] = member.value
                    continue
                }
                result[member.key] = annotated(member.value, names: names, skipping: skipping)
                if case .integer(let milliseconds) = member.value, (0...253_402_300_799_999).contains(milliseconds),
                    member.key == "now" || member.key.hasSuffix("Date") || member.key.hasSuffix("At")
                        || names.contains(member.key)
                {
                    result[member.key + "ISO"] = .string(string(milliseconds: milliseconds))
                }
            }
            return .object(result)
        default: return value
        }
    }
}
