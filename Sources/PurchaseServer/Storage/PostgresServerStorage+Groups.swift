import Foundation
import StoreModel
import StorekeeperPostgres
import StorekeeperSQL
import Synchronization

/// Writes of updates run in groups (group commits) by a few runners, each group one transaction.
extension PostgresServerStorage {
    /// Writes of updates to distinct subscriptions that wait at the same moment run in one transaction (a
    /// group commit): their locks, in one order (no two groups wait for each other), their inputs' inserts
    /// and their reads in one round trip; their bodies one after the other, each reading what was read for
    /// it (no other body of the group writes the subscription, purchases or account token it read); their
    /// writes and the commit in one more. A write waits for a group only while every runner is busy: alone,
    /// it runs at once as before. When a group fails (a body threw, or PostgreSQL refused a statement), its
    /// writes run again one by one, so a failure is only its own write's.
    public func write<T: Sendable>(ahead: WriteAhead, _ body: @escaping @Sendable (any ServerStore) throws -> T)
        async throws -> T?
    {
        let result: (any Sendable)? = try await withCheckedThrowingContinuation { continuation in
            let write = GroupedWrite(ahead: ahead, body: { try body($0) }, resume: { continuation.resume(with: $0) })
            let (startRunner, woken) = grouped.withLock { queue in
                (queue.enqueue(write, runners: groupRunners), queue.gathered(target: gathering.target))
            }
            woken?.resume()
            if startRunner { Task { await self.runGroups() } }
        }
        return result.map { $0 as! T }
    }

    /// Writes of updates waiting for a runner (tests).
    package var waitingWrites: Int { grouped.withLock { $0.waiting.count } }
    /// Groups that failed and ran their writes one by one, so far in this process (tests).
    package var groupsApart: Int { groupsRunApart.load(ordering: .relaxed) }

    struct GroupedWrite: Sendable {
        let ahead: WriteAhead
        let body: @Sendable (any ServerStore) throws -> any Sendable
        let resume: @Sendable (Result<(any Sendable)?, any Error>) -> Void
    }

    struct GroupQueue {
        var waiting: [GroupedWrite] = []
        var running = 0
        /// Runners gathering a group (``GroupGathering``), each woken once: when enough writes wait, or when
        /// its time is up (its timer, cancelled when woken first).
        var gatherers: [Int: (waiting: CheckedContinuation<Void, Never>, timer: Task<Void, Never>?)] = [:]
        var gatherersStarted = 0

        /// The longest-gathering runner to wake now that `target` writes wait, if any (its timer cancelled).
        mutating func gathered(target: Int) -> CheckedContinuation<Void, Never>? {
            guard waiting.count >= target, let key = gatherers.keys.min(),
                let gatherer = gatherers.removeValue(forKey: key)
            else { return nil }
            gatherer.timer?.cancel()
            return gatherer.waiting
        }

        /// Whether a runner is to start for it (one less than the limit runs).
        mutating func enqueue(_ write: GroupedWrite, runners: Int) -> Bool {
            waiting.append(write)
            guard running < runners else { return false }
            running += 1
            return true
        }

        /// The oldest waiting writes of distinct subscriptions, at most `limit`; nil when none waits (the
        /// runner then stops).
        mutating func next(limit: Int) -> [GroupedWrite]? {
            guard !waiting.isEmpty else {
                running -= 1
                return nil
            }
            var originals: Set<TransactionID> = []
            var batch: [GroupedWrite] = []
            var rest: [GroupedWrite] = []
            for write in waiting {
                if batch.count < limit, originals.insert(write.ahead.original).inserted {
                    batch.append(write)
                } else {
                    rest.append(write)
                }
            }
            waiting = rest
            return batch
        }
    }

    /// Waits for writes to gather (``gathering``), if the queue and the machine call for it.
    private func gather() async {
        guard gathering.worthWaiting(waiting: grouped.withLock({ $0.waiting.count })) else { return }
        let delay = gathering.maxDelay
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let key = grouped.withLock { queue -> Int? in
                guard queue.waiting.count < gathering.target else { return nil }
                queue.gatherersStarted += 1
                queue.gatherers[queue.gatherersStarted] = (continuation, nil)
                return queue.gatherersStarted
            }
            guard let key else { return continuation.resume() }
            let timer = Task { [weak self] in
                // Cancelled: woken by a write, which resumed the runner.
                guard (try? await Task.sleep(for: delay)) != nil else { return }
                self?.grouped.withLock { $0.gatherers.removeValue(forKey: key) }?.waiting.resume()
            }
            let woken = grouped.withLock { queue in
                guard queue.gatherers[key] != nil else { return true }
                queue.gatherers[key]?.timer = timer
                return false
            }
            if woken { timer.cancel() }
        }
    }

    private func runGroups() async {
        while true {
            await gather()
            guard let batch = grouped.withLock({ $0.next(limit: Self.groupLimit) }) else { break }
            guard batch.count > 1 else {
                await runAlone(batch[0])
                continue
            }
            let ordered = batch.sorted { WriteAhead.locksFirst($0.ahead.original, before: $1.ahead.original) }
            writeCounter.ran(writes: ordered.count)
            do {
                let results = try await signingHeaders.tracking { headers in
                    try await database.lockingWrite { try Self.runTogether(ordered, on: $0, headers: headers) }
                }
                for (write, result) in zip(ordered, results) { write.resume(.success(result)) }
            } catch {
                // Nothing of the group was committed: each write runs again on its own, its failure its own
                // (one after the other: the pool stays for other work). Unless the connection was lost while
                // it committed and the group did commit: then each finds its input kept (a duplicate).
                groupsRunApart.add(1, ordering: .relaxed)
                for write in ordered { await runAlone(write) }
            }
        }
    }

    /// A write of an update in a transaction of its own (``write(_:)``).
    private func runAlone(_ grouped: GroupedWrite) async {
        do {
            let result = try await write { store -> (any Sendable)? in try grouped.ahead.run(in: store, grouped.body) }
            grouped.resume(.success(result))
        } catch {
            grouped.resume(.failure(error))
        }
    }

    /// The group's writes in the open transaction: their locks, inputs and reads in one round trip, then
    /// their bodies; the caller commits. Any failure is the group's (a body's input is inserted already).
    private static func runTogether(
        _ writes: [GroupedWrite], on connection: PostgresConnection, headers: SigningHeaders.Tracking
    ) throws -> [(any Sendable)?] {
        var store = SQLServerStore(connection: connection, headers: headers)
        store.touches = .init()
        var sets: [Int] = []
        for write in writes {
            try store.lock(original: write.ahead.original)
            sets.append(try connection.readAheadLater(store.statementsAhead(write.ahead)))
        }
        try connection.synchronizeReadAheads()
        var results: [(any Sendable)?] = []
        for (write, set) in zip(writes, sets) {
            connection.useReadAhead(set)
            if let input = write.ahead.input, !(try store.recordInput(input, received: write.ahead.received)) {
                results.append(nil)
                continue
            }
            results.append(try write.body(store))
        }
        try store.touchNoted()
        return results
    }
}
