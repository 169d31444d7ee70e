import Dispatch
import Synchronization

/// A fixed number of threads that send claimed notifications, shared by every batch: a slow receiver
/// holds up at most this many threads, however many batches wait behind it. Each lane takes the next
/// whole chain (one subscription's notifications, sent in the order they were written); when a batch's
/// last chain is done, its results go to the batch's `done`, once.
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

    private struct State {
        /// Chains waiting for a lane, first come first served (`head` is the next one; those before it are
        /// taken, and nil so that their payloads are not kept).
        var waiting: [(Batch, [OutboundNotification])?] = []
        var head = 0
        var running = 0
    }

    private let state = Mutex(State())
    let lanes: Int

    init(lanes: Int) { self.lanes = max(1, lanes) }

    /// Queues `chains` (none empty) to be sent with `send`; `done` gets every result once all are sent.
    func submit(
        _ chains: [[OutboundNotification]], send: @escaping @Sendable (OutboundNotification) -> AppStore.Attempted,
        done: @escaping @Sendable ([AppStore.Attempted]) -> Void
    ) {
        guard !chains.isEmpty else { return }
        let batch = Batch(chains: chains.count, send: send, done: done)
        let starting = state.withLock { state in
            state.waiting += chains.map { (batch, $0) }
            let starting = min(lanes - state.running, state.waiting.count - state.head)
            state.running += starting
            return starting
        }
        for _ in 0..<starting {
            // A serial queue of its own: an overcommitting thread, never one of the cooperative pool's.
            DispatchQueue(label: "storekeeper.notifications.delivery").async { self.run() }
        }
    }

    /// A lane: sends chains until none waits.
    private func run() {
        while let (batch, chain) = next() {
            batch.finished(chain.map { batch.send($0) })
        }
    }

    private func next() -> (Batch, [OutboundNotification])? {
        state.withLock { state in
            guard state.head < state.waiting.count else {
                state.running -= 1
                state.waiting = []
                state.head = 0
                return nil
            }
            let item = state.waiting[state.head]
            state.waiting[state.head] = nil
            state.head += 1
            // Drop what was taken once it is most of the array (amortised O(1) a chain).
            if state.head > 1_024, state.head * 2 > state.waiting.count {
                state.waiting.removeFirst(state.head)
                state.head = 0
            }
            return item
        }
    }
}
