package import AppStoreSignedData
import Dispatch
import Foundation
package import StorekeeperJSON
import StorekeeperSQL
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
        let data = try V2NotificationSigning.data(
            data, transaction: transaction, renewalInfo: renewalInfo, signer: signer)
        return try notifications.map { unsigned, start in
            let bytes = V2NotificationSigning.payloadBytes(start, data: data, signedDate: signedDate)
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
    /// as it is added, while the run goes on with the next event; ``sign()`` signs what no thread has
    /// started yet itself, then waits for the rest.
    final class Batch: Sendable {
        private let results = Mutex<[Result<[OutboundNotification], any Error>?]>([])
        private let group = DispatchGroup()

        func add(_ signing: V2Signing) {
            let index = results.withLock { results in
                results.append(nil)
                return results.count - 1
            }
            group.enter()
            SigningThreads.shared.submit { [self] in
                let result = Result { try signing.sign() }
                results.withLock { $0[index] = result }
                group.leave()
            }
        }

        /// Every notification added, signed, in the order they were added.
        func sign() throws -> [OutboundNotification] {
            // The run waits on this: rather than idle while lower-priority threads catch up, it signs the jobs
            // no thread has started (its own, or another store's in the same process), then waits for the rest.
            while let job = SigningThreads.shared.takeJob() { job() }
            group.wait()
            let done = results.withLock { results in
                defer { results = [] }
                return results
            }
            return try done.flatMap { try $0!.get() }
        }
    }
}

/// How a V2 notification's payload is made from its parts: the transaction and renewal info signed into
/// `data`, then the payload around `data` written as JSON, ready to sign. ``V2Signing`` makes every
/// notification this way, and `storekeeper bench lifecycle`'s floors repeat it, so they measure this code.
package enum V2NotificationSigning {
    /// `data` with `signedTransactionInfo` and, given renewal info, `signedRenewalInfo` (two signatures).
    package static func data(
        _ data: JSONObject, transaction: JSONObject, renewalInfo: JSONObject?, signer: JWSChainSigner
    ) throws -> JSONObject {
        var data = data
        data["signedTransactionInfo"] = .string(try signer.sign(transaction))
        if let renewalInfo { data["signedRenewalInfo"] = .string(try signer.sign(renewalInfo)) }
        return data
    }

    /// `payload` with `data`, `version` 2.0 and `signedDate` (appended, or replaced in place), as JSON.
    package static func payloadBytes(_ payload: JSONObject, data: JSONObject, signedDate: JSONValue) -> [UInt8] {
        var payload = payload
        payload["data"] = .object(data)
        payload["version"] = .string("2.0")
        payload["signedDate"] = signedDate
        return JSONWriter.bytes(.object(payload))
    }
}

/// One thread a core that signs notifications, at a lower scheduling priority than the rest of the process
/// (nice 10, and Linux's SCHED_BATCH, under which a woken thread does not preempt the one running): on a
/// busy machine the run of due events, the writer and deliveries go first, and signing takes the time they
/// leave. A thread drains the queue before it sleeps, and a job wakes a thread only when one sleeps, so the
/// run handing over its jobs is not switched out at each (perf's sched_switch: ~90% of the run's context
/// switches were in waking a signer). A run waiting for its signatures signs the jobs not yet started
/// itself.
final class SigningThreads: Sendable {
    static let shared = SigningThreads(count: max(1, ProcessInfo.processInfo.activeProcessorCount))

    typealias Job = @Sendable () -> Void

    /// Jobs in the order submitted, and the threads asleep.
    private struct Queue {
        var jobs = WaitingLine<Job>()
        var sleeping = 0

        mutating func take() -> Job? { jobs.take() }
    }

    private let queue = Mutex(Queue())
    /// Signalled once for each sleeping thread a submit wakes.
    private let wake = DispatchSemaphore(value: 0)

    private init(count: Int) {
        for _ in 0..<count {
            Thread { [self] in
                // Linux applies these to the calling thread alone; both are allowed without privileges.
                var parameters = sched_param(sched_priority: 0)
                _ = sched_setscheduler(0, Self.schedBatch, &parameters)
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)
                while true {
                    let job = queue.withLock { queue -> Job? in
                        if let job = queue.take() { return job }
                        queue.sleeping += 1
                        return nil
                    }
                    if let job { job() } else { wake.wait() }
                }
            }.start()
        }
    }

    /// Linux's SCHED_BATCH (sched.h; Glibc declares it for _GNU_SOURCE only).
    private static let schedBatch: Int32 = 3

    func submit(_ job: @escaping Job) {
        let wakeOne = queue.withLock { queue -> Bool in
            queue.jobs.append(job)
            guard queue.sleeping > 0 else { return false }
            queue.sleeping -= 1
            return true
        }
        if wakeOne { wake.signal() }
    }

    /// The oldest job no thread has started, if any.
    func takeJob() -> Job? {
        queue.withLock { $0.take() }
    }
}
