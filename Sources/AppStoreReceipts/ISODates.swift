import Foundation
import StoreModel
package import StorekeeperJSON

/// ISO 8601 beside epoch milliseconds in what the command line prints and the purchase server answers.
package enum ISODates {
    package static func string(milliseconds: Int64) -> String {
        ReceiptDate.rfc3339String(EpochMilliseconds.date(milliseconds) ?? .distantPast)
    }

    /// The ISO 8601 sibling of member `key` holding `milliseconds`, when the member is a date (a name ending in
    /// `Date` or `At`, `now`, or one of `names`, with a plausible value).
    package static func sibling(_ key: String, _ milliseconds: Int64, names: Set<String> = []) -> (
        key: String, value: String
    )? {
        guard (0...253_402_300_799_999).contains(milliseconds),
            key == "now" || key.hasSuffix("Date") || key.hasSuffix("At") || names.contains(key)
        else { return nil }
        return (key + "ISO", string(milliseconds: milliseconds))
    }

    /// What the writer adds as it writes an answer: ``sibling(_:_:names:)`` beside each date, nothing inside the
    /// members named in `skipping`.
    package static func writerSiblings(names: Set<String>, skipping: Set<String>) -> JSONWriter.Siblings {
        JSONWriter.Siblings(skipping: skipping) { key, milliseconds in sibling(key, milliseconds, names: names) }
    }

    /// A copy of `value` in which every date member (``sibling(_:_:names:)``) gains its ISO 8601 sibling.
    /// `names`: more members that hold epoch milliseconds whatever their suffix (the purchase server's `date`,
    /// `nextAttempt`, a chart point's `start` and `end`).
    /// `skipping`: members whose value is copied as it is (maps keyed by ids, such as the server's `balances`).
    package static func annotated(_ value: JSONValue, names: Set<String> = [], skipping: Set<String> = []) -> JSONValue
    {
        switch value {
        case .array(let items): return .array(items.map { annotated($0, names: names, skipping: skipping) })
        case .object(let object):
            // Copied member by member (the keys are the object's own, so unique), each date's sibling after it.
            var result = JSONObject()
            for member in object.members {
                if skipping.contains(member.key) {
                    result.appendUnique(member.key, member.value)
                    continue
                }
                result.appendUnique(member.key, annotated(member.value, names: names, skipping: skipping))
                if case .integer(let milliseconds) = member.value,
                    let sibling = sibling(member.key, milliseconds, names: names), object[sibling.key] == nil
                {
                    result.appendUnique(sibling.key, .string(sibling.value))
                }
            }
            return .object(result)
        default: return value
        }
    }
}
