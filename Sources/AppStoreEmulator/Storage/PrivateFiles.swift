import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Files that hold secrets: created with mode 0600 from their first byte (never a world-readable moment
/// under a loose umask), in directories of mode 0700.
public enum PrivateFiles {
    /// Writes a new file (it must not exist) readable by its owner only, and flushes it to disk.
    public static func create(_ path: String, contents: [UInt8]) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw EmulatorError.configuration("cannot create \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var written = 0
        while written < contents.count {
            let result = contents.withUnsafeBytes {
                write(descriptor, $0.baseAddress! + written, contents.count - written)
            }
            guard result > 0 else {
                throw EmulatorError.configuration("cannot write \(path): \(String(cString: strerror(errno)))")
            }
            written += result
        }
        guard fsync(descriptor) == 0 else {
            throw EmulatorError.configuration("cannot flush \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Creates a directory with mode 0700; an existing one is narrowed to 0700 when `narrowExisting` (for
    /// directories that are the emulator's own, such as `pki/`; a data directory the user named is left as
    /// it is).
    static func directory(_ url: URL, narrowExisting: Bool) throws {
        if FileManager.default.fileExists(atPath: url.path) {
            guard narrowExisting else { return }
        } else {
            try FileManager.default.createDirectory(
                at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        guard chmod(url.path, 0o700) == 0 else {
            throw EmulatorError.configuration(
                "cannot restrict \(url.path) to its owner: \(String(cString: strerror(errno)))")
        }
    }
}
