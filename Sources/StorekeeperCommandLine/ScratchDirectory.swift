public import Foundation

/// A directory a command works in and removes when done.
public enum ScratchDirectory {
    /// A new directory under the system's temporary directory, readable by this user alone (0700), named with
    /// `prefix` and a random UUID. It is made with one `mkdir`, so no other caller gets it, in this process or
    /// another. (Foundation's `itemReplacementDirectory` names one per process name and checks for it before
    /// making it, so two made at once, by two threads or two `storekeeper` processes, could be one.)
    public static func make(_ prefix: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: url, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        return url
    }
}
