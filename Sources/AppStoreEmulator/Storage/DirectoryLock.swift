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
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(descriptor)
            throw EmulatorError.configuration(
                "the data directory \(directory.path) is in use by another emulator (\(path) is locked)")
        }
        self.descriptor = Mutex(descriptor)
    }

    /// Gives the directory up (idempotent).
    func release() {
        descriptor.withLock { descriptor in
            if let open = descriptor { close(open) }
            descriptor = nil
        }
    }

    deinit { release() }
}
