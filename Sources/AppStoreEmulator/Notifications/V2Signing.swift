import AppStoreSignedData
import Dispatch
import Foundation
import StorekeeperJSON
import Synchronization

/// The signatures of one change's V2 notifications, rendered but not yet signed: the transaction, the
/// renewal info, then each URL's payload around them (three ES256 signatures for one URL). Signing costs
/// as much as the rest of a renewal, so a run of due events hands each change's notifications to a
/// ``Batch``, which signs them on other threads while the run goes on, and waits for them before the run's
/// transaction commits (what is stored is the same as signing each at once).
struct V2Signing: Sendable {
    let signer: JWSChainSigner
    let transaction: JSONObject
    let renewalInfo: JSONObject?
    /// `data` without its two signed members.
    let data: JSONObject
    /// Each URL's notification (without body and signed payload) and its payload without data, version
    /// and signed date.
    let notifications: [(OutboundNotification, JSONObject)]
    let signedDate: JSONValue
    /// The signer's header and its fingerprint, for the outbox's stored form of each payload.
    let header: StoredJWS.Header

    /// The notifications, signed.
    func sign() throws -> [OutboundNotification] {
        var data = self.data
        data["signedTransactionInfo"] = .string(try signer.sign(transaction))
        if let renewalInfo { data["signedRenewalInfo"] = .string(try signer.sign(renewalInfo)) }
        return try notifications.map { unsigned, start in
            var payload = start
            payload["data"] = .object(data)
            payload["version"] = .string("2.0")
            payload["signedDate"] = signedDate
            let bytes = JSONWriter.bytes(.object(payload))
            let signed = try signer.sign(payloadBytes: bytes)
            var notification = unsigned
            notification.signedPayload = signed
            // The stored form from the bytes just signed: the writer then decodes and rewrites nothing.
            let signature = signed.utf8.lastIndex(of: StoredJWS.dot).map {
                signed.utf8[signed.utf8.index(after: $0)...]
            }
            notification.compactPayload = signature.flatMap {
                StoredJWS.compact(payload: bytes, signature: $0, header: header.bytes, fingerprint: header.fingerprint)
            }.map { CompactPayload(header: header, bytes: $0) }
            notification.body = OutboundNotification.v2Body(signedPayload: signed, signed: true)
            return notification
        }
    }

    /// Where the notifications of the current run of due events wait to be signed (nil outside one: each
    /// is signed when it is made).
    @TaskLocal static var batch: Batch?

    /// The notifications a run of due events made, in order. Each is signed on a background thread as soon
    /// as it is added, while the run goes on with the next event; ``sign()`` waits for the last.
    final class Batch: Sendable {
        private let results = Mutex<[Result<[OutboundNotification], any Error>?]>([])
        private let group = DispatchGroup()
        private static let queue = DispatchQueue(label: "storekeeper.notifications.signing", attributes: .concurrent)

        func add(_ signing: V2Signing) {
            let index = results.withLock { results in
                results.append(nil)
                return results.count - 1
            }
            Self.queue.async(group: group) { [self] in
                let result = Result { try signing.sign() }
                results.withLock { $0[index] = result }
            }
        }

        /// Every notification added, signed, in the order they were added.
        func sign() throws -> [OutboundNotification] {
            group.wait()
            let done = results.withLock { results in
                defer { results = [] }
                return results
            }
            return try done.flatMap { try $0!.get() }
        }
    }
}
