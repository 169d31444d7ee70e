import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// An exclusive lock on a data directory (`flock` on `DIR/lock`), held while the emulator runs, so a second
/// emulator on the same directory refuses to start instead of writing beside the first. Creates the
/// directory (mode 0700) when it is missing.
final class DirectoryLock: Sendable {
    private let descriptor: Mutex<Int32?>

    init(directory: URL) throws {
        try PrivateFiles.directory(directory, narrowExisting: false)
        let path = directory.appendingPathComponent("lock").path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw EmulatorError.configuration(
                "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        // A child this process forks (a tool it runs, between fork and exec) holds a copy of the descriptor, and
        // so the lock, for a moment after the emulator before closed it: a lock refused is asked for again for
        // up to half a second before the directory counts as in use.
        var retries = 0
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, retries < Self.retries else {
                close(descriptor)
                throw EmulatorError.configuration(
                    "the data directory \(directory.path) is in use by another emulator (\(path) is locked)")
            }
            retries += 1
            usleep(10_000)
        }
        self.descriptor = Mutex(descriptor)
    }

    /// Times a refused lock is asked for again, 10 ms apart.
    static let retries = 50

    /// Gives the directory up (idempotent).
    func release() {
        descriptor.withLock { descriptor in
            if let open = descriptor { close(open) }
            descriptor = nil
        }
    }

    deinit { release() }
}
