import Foundation
import StorekeeperLogging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// SIGINT and SIGTERM for the whole process. ``install()`` gives both a handler that only writes the signal's
/// number to a pipe (the one async-signal-safe thing it needs), and starts one thread that reads the pipe. A
/// command that serves calls ``hold()`` before it tells anyone its address, then awaits ``received()``, so
/// no thread of Swift's pool is held while it waits and a signal that comes early is kept for it; with no
/// command holding them, the thread ends the process with the signal's default action, as if it had no
/// handler.
/// (Blocking the signals and taking them with `sigwait` does not work under an `async` main: the main thread
/// waits in libdispatch's `sigsuspend` with an empty mask, so the kernel delivers the signal there.)
package enum TerminationSignals {
    private struct State {
        var installed = false
        /// A command will wait for the signals: one that comes before it waits is kept.
        var held = false
        /// A signal (or ``stop()``) that came while nobody waited: the next ``received()`` returns at once.
        var pending = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private static let state = Mutex(State())
    /// The pipe's write end, set once before the handlers are installed; read by the handler.
    nonisolated(unsafe) private static var writeEnd: Int32 = -1

    /// Installs the handlers and starts the thread that reads what they write. Calling it again does nothing.
    package static func install() {
        let first = state.withLock { state in
            defer { state.installed = true }
            return !state.installed
        }
        guard first else { return }
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return }
        _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        writeEnd = ends[1]
        let readEnd = ends[0]
        let thread = Thread {
            while true {
                var byte: UInt8 = 0
                let count = read(readEnd, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                guard count == 1 else { return }
                let received = Int32(byte)
                let (waiting, held) = state.withLock { state in
                    defer { state.waiting = [] }
                    if state.waiting.isEmpty && state.held { state.pending = true }
                    return (state.waiting, state.held)
                }
                if waiting.isEmpty && !held {
                    // Nobody serves: the signal's default action, as if it had no handler. This thread may
                    // have been made with signals blocked, so it unblocks this one before raising it.
                    signal(received, SIG_DFL)
                    var only = sigset_t()
                    sigemptyset(&only)
                    sigaddset(&only, received)
                    pthread_sigmask(SIG_UNBLOCK, &only, nil)
                    // The default action skips atexit: the log's buffered lines go out first.
                    StreamLogHandler.flushAll()
                    raise(received)
                }
                for continuation in waiting { continuation.resume() }
            }
        }
        thread.name = "storekeeper.signals"
        thread.start()
        for number in [SIGINT, SIGTERM] {
            signal(number) { number in
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(TerminationSignals.writeEnd, &byte, 1)
            }
        }
    }

    /// From now on a signal is kept for ``received()`` instead of ending the process. Installs the
    /// handlers if `main` did not.
    package static func hold() {
        install()
        state.withLock { $0.held = true }
    }

    /// Returns when SIGINT or SIGTERM arrives, or has arrived since ``hold()`` (or ``stop()`` is called).
    package static func received() async {
        hold()
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Ends every wait as a signal would: a command that has done what it was asked.
    package static func stop() {
        let waiting = state.withLock { state in
            defer { state.waiting = [] }
            if state.waiting.isEmpty { state.pending = true }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }
}
