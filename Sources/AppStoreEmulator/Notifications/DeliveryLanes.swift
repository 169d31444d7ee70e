import Dispatch
import StorekeeperSQL
import Synchronization

/// A fixed number of threads that send claimed notifications, shared by every batch and receiver: a slow
/// receiver holds up at most `perReceiver` of them, however many batches wait behind it, and the rest go
/// on sending to the others. Each lane takes a whole chain (one subscription's notifications to one
/// receiver, sent in the order they were written): the oldest of the receiver holding the fewest lanes.
/// When a batch's last chain is done, its results go to the batch's `done`, once.
final class DeliveryLanes: Sendable {
    /// One submitted batch: its chains left and the results so far.
    private final class Batch: Sendable {
        let send: @Sendable (OutboundNotification) -> AppStore.Attempted
        let done: @Sendable ([AppStore.Attempted]) -> Void
        let progress: Mutex<(left: Int, results: [AppStore.Attempted])>

        init(
            chains: Int, send: @escaping @Sendable (OutboundNotification) -> AppStore.Attempted,
            done: @escaping @Sendable ([AppStore.Attempted]) -> Void
        ) {
            self.send = send
            self.done = done
            progress = Mutex((chains, []))
        }

        func finished(_ results: [AppStore.Attempted]) {
            let all: [AppStore.Attempted]? = progress.withLock { progress in
                progress.results += results
                progress.left -= 1
                return progress.left == 0 ? progress.results : nil
            }
            if let all { done(all) }
        }
    }

    /// One receiver's (URL's) chains waiting for a lane, first come first served (`head` is the next one;
    /// those before it are taken, and nil so that their payloads are not kept), and the lanes sending its
    /// chains now.
    private struct Line {
        var waiting = WaitingLine<(order: UInt64, batch: Batch, chain: [OutboundNotification])>()
        var running = 0
        var next: UInt64? { waiting.first?.order }
    }

    private struct State {
        var lines: [String: Line] = [:]
        /// Lanes started and not yet stopped.
        var running = 0
        /// Lanes sending a chain now (the lines' `running`, summed).
        var busy = 0
        /// Chains submitted so far (each chain's place in the order of all).
        var submitted: UInt64 = 0
    }

    private let state = Mutex(State())
    let lanes: Int
    /// The lanes one receiver may hold at once.
    let perReceiver: Int
    /// The last lanes, taken only for a receiver that has none: however many receivers hang, one that
    /// answers still has a lane.
    let reserve: Int

    init(lanes: Int, perReceiver: Int, reserve: Int) {
        self.lanes = max(1, lanes)
        self.perReceiver = max(1, min(perReceiver, self.lanes))
        self.reserve = max(0, min(reserve, self.lanes - 1))
    }

    /// Queues `chains` (none empty; each sent to one receiver, its first notification's URL) to be sent with
    /// `send`; `done` gets every result once all are sent.
    func submit(
        _ chains: [[OutboundNotification]], send: @escaping @Sendable (OutboundNotification) -> AppStore.Attempted,
        done: @escaping @Sendable ([AppStore.Attempted]) -> Void
    ) {
        let chains = chains.filter { !$0.isEmpty }
        guard !chains.isEmpty else { return }
        let batch = Batch(chains: chains.count, send: send, done: done)
        let starting = state.withLock { state in
            for chain in chains {
                state.submitted += 1
                state.lines[chain[0].url, default: Line()].waiting.append((state.submitted, batch, chain))
            }
            // As many lanes as there are chains a lane may take now.
            let ready = state.lines.values.reduce(0) { ready, line in
                ready + min(line.waiting.count, max(0, perReceiver - line.running))
            }
            let starting = max(0, min(lanes - state.running, ready))
            state.running += starting
            return starting
        }
        for _ in 0..<starting {
            // A serial queue of its own: an overcommitting thread, never one of the cooperative pool's.
            DispatchQueue(label: "storekeeper.notifications.delivery").async { self.run() }
        }
    }

    /// A lane: sends chains until none waits that it may take.
    private func run() {
        var finished: String?
        while let (receiver, batch, chain) = next(after: finished) {
            batch.finished(chain.map { batch.send($0) })
            finished = receiver
        }
    }

    /// The next chain for a lane that has just sent one to `finished`: the oldest of the receiver holding
    /// the fewest lanes (below its limit; the reserve only for one holding none), so that receivers share
    /// the lanes; nil stops the lane.
    private func next(after finished: String?) -> (String, Batch, [OutboundNotification])? {
        state.withLock { state in
            if let finished {
                state.lines[finished]?.running -= 1
                state.busy -= 1
            }
            var best: (receiver: String, running: Int, order: UInt64)?
            for (receiver, line) in state.lines where line.running < perReceiver {
                guard let order = line.next, line.running == 0 || state.busy < lanes - reserve else { continue }
                if let current = best, (current.running, current.order) <= (line.running, order) { continue }
                best = (receiver, line.running, order)
            }
            guard let receiver = best?.receiver, state.lines[receiver]?.next != nil,
                var line = state.lines.removeValue(forKey: receiver), let item = line.waiting.take()
            else {
                state.running -= 1
                // Receivers with nothing waiting and no lane are forgotten.
                state.lines = state.lines.filter { $0.value.running > 0 || $0.value.next != nil }
                return nil
            }
            line.running += 1
            state.busy += 1
            state.lines[receiver] = line
            return (receiver, item.batch, item.chain)
        }
    }
}
