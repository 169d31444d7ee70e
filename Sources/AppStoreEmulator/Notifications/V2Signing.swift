import AppStoreSignedData
import Dispatch
import Foundation
import StorekeeperJSON
import Synchronization

/// The signatures of one change's V2 notifications, rendered but not yet signed: the transaction, the
/// renewal info, then each URL's payload around them (three ES256 signatures for one URL). Signing is
/// most of a renewal's cost, so a run of due events collects its notifications in a ``Batch`` and signs
/// them on every core just before the run's transaction commits (what is stored is the same as signing
/// each at once).
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
            let signed = try signer.sign(payload)
            var notification = unsigned
            notification.signedPayload = signed
            notification.body = OutboundNotification.v2Body(signedPayload: signed)
            return notification
        }
    }

    /// Where the notifications of the current run of due events wait to be signed (nil outside one: each
    /// is signed when it is made).
    @TaskLocal static var batch: Batch?

    /// The notifications a run of due events made, in order.
    final class Batch: Sendable {
        private let work = Mutex<[V2Signing]>([])

        func add(_ signing: V2Signing) { work.withLock { $0.append(signing) } }

        /// Every notification, signed on as many threads as there are cores, in the order they were made.
        func sign() throws -> [OutboundNotification] {
            let jobs = work.withLock { jobs in
                defer { jobs = [] }
                return jobs
            }
            guard jobs.count > 1 else { return try jobs.flatMap { try $0.sign() } }
            let lanes = min(jobs.count, max(1, ProcessInfo.processInfo.activeProcessorCount))
            let results = Mutex([Result<[OutboundNotification], any Error>?](repeating: nil, count: jobs.count))
            DispatchQueue.concurrentPerform(iterations: lanes) { lane in
                for index in stride(from: lane, to: jobs.count, by: lanes) {
                    let result = Result { try jobs[index].sign() }
                    results.withLock { $0[index] = result }
                }
            }
            return try results.withLock { $0 }.flatMap { try $0!.get() }
        }
    }
}
