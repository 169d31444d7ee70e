import Synchronization

/// The background work one part of the emulator starts (a mass extension, a run of due events a request
/// asked for, an attempt's record): each job is kept until it ends, and ``close()`` cancels every one still
/// running and refuses new ones, so nothing outlives the store that started it.
final class BackgroundJobs: Sendable {
    private struct State {
        var next = 0
        var running: [Int: Task<Void, Never>] = [:]
        var closed = false
    }

    private let state = Mutex(State())

    /// Starts `work` off the caller's task; does nothing once closed.
    func start(_ work: @escaping @Sendable () async -> Void) {
        state.withLock { state in
            guard !state.closed else { return }
            let id = state.next
            state.next += 1
            state.running[id] = Task.detached { [self] in
                await work()
                _ = self.state.withLock { $0.running.removeValue(forKey: id) }
            }
        }
    }

    /// Jobs still running.
    var count: Int { state.withLock { $0.running.count } }

    /// Cancels every running job and refuses new ones.
    func close() {
        let running = state.withLock { state in
            state.closed = true
            defer { state.running = [:] }
            return Array(state.running.values)
        }
        for task in running { task.cancel() }
    }
}
