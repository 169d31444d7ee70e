package import Foundation

/// Where a command reads and writes; the standard streams in the executable, buffers in tests.
public struct Console: Sendable {
    /// Reads all of standard input, up to `limit` bytes (more is an error).
    public var readInput: @Sendable (_ limit: Int) throws -> [UInt8]
    public var write: @Sendable (String) -> Void
    public var writeError: @Sendable (String) -> Void

    public init(
        readInput: @escaping @Sendable (Int) throws -> [UInt8], write: @escaping @Sendable (String) -> Void,
        writeError: @escaping @Sendable (String) -> Void
    ) {
        self.readInput = readInput
        self.write = write
        self.writeError = writeError
    }

    /// The process's standard streams.
    public static let standard = Console(
        readInput: { limit in try readLimited(FileHandle.standardInput, limit: limit, name: "standard input") },
        write: { text in FileHandle.standardOutput.write(Data(text.utf8)) },
        writeError: { text in FileHandle.standardError.write(Data(text.utf8)) })
}

/// Reads a file handle to its end, refusing more than `limit` bytes.
package func readLimited(_ handle: FileHandle, limit: Int, name: String) throws -> [UInt8] {
    var bytes: [UInt8] = []
    while true {
        guard let chunk = try handle.read(upToCount: 1 << 16), !chunk.isEmpty else { break }
        bytes.append(contentsOf: chunk)
        guard bytes.count <= limit else { throw CommandError.runtime("\(name) is larger than \(limit) bytes") }
    }
    return bytes
}

/// Reads `path` (or standard input for nil or `-`), refusing more than `limit` bytes.
package func readInput(_ path: String?, console: Console, limit: Int) throws -> [UInt8] {
    guard let path, path != "-" else { return try console.readInput(limit) }
    guard let handle = FileHandle(forReadingAtPath: path) else { throw CommandError.input("cannot read '\(path)'") }
    defer { try? handle.close() }
    return try readLimited(handle, limit: limit, name: "'\(path)'")
}
