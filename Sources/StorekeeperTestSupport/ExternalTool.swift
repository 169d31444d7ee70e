public import Foundation
import StorekeeperCommandLine
import Synchronization

/// Runs programs outside the test process (the `openssl` tool, the built `storekeeper` binary).
public enum ExternalTool {
    public struct Output: Sendable {
        public var status: Int32
        public var stdout: [UInt8]
        public var stderr: [UInt8]
        public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
        public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    }

    /// The full path of `name` on `PATH`, or nil.
    public static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// Runs `executable` with `arguments`, feeding `stdin`, and waits for it; `environment` adds to (or
    /// overrides) the test process's environment.
    public static func run(
        _ executable: String, _ arguments: [String], stdin: [UInt8] = [], environment: [String: String] = [:]
    ) throws -> Output {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let input = Pipe()
        let output = Pipe()
        let error = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = error
        try process.run()
        let writer = Thread {
            input.fileHandleForWriting.write(Data(stdin))
            try? input.fileHandleForWriting.close()
        }
        writer.start()
        let errorData = Mutex<Data?>(nil)
        let errorReader = Thread {
            let data = error.fileHandleForReading.readDataToEndOfFile()
            errorData.withLock { $0 = data }
        }
        errorReader.start()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        var stderr: Data?
        while stderr == nil {
            stderr = errorData.withLock { $0 }
            if stderr == nil { Thread.sleep(forTimeInterval: 0.001) }
        }
        return Output(status: process.terminationStatus, stdout: Array(outputData), stderr: Array(stderr ?? Data()))
    }

    /// A fresh temporary directory, removed with everything in it when the process exits.
    /// A file's permission bits (`0o600`), or -1 when they cannot be read.
    public static func mode(_ path: String) throws -> Int {
        try (FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
    }

    public static func temporaryDirectory() throws -> URL {
        let url = try ScratchDirectory.make("storekeeper-test")
        let first = temporaryDirectories.withLock { made in
            made.append(url)
            return made.count == 1
        }
        if first {
            atexit {
                for url in temporaryDirectories.withLock({ $0 }) { try? FileManager.default.removeItem(at: url) }
            }
        }
        return url
    }
}

/// The directories ``ExternalTool/temporaryDirectory()`` made (a test run made thousands, left in /tmp).
private let temporaryDirectories = Mutex<[URL]>([])
