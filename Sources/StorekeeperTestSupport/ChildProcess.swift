public import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process for tests, with the part of Foundation's `Process` interface they use, started with
/// `posix_spawn` directly. Foundation's `Process.run` on Linux lists `/proc/self/fd` to close every other
/// descriptor in the child and copies each entry's whole `d_name`; with ~1,360 descriptors open (a test
/// process with the suite in parallel) that read ran past its buffer and crashed the process once. Here the
/// child closes them with glibc's `posix_spawn_file_actions_addclosefrom_np`, which lists nothing.
public final class ChildProcess: @unchecked Sendable {
    // @unchecked Sendable: configured on one thread before `run()`; afterwards only `state` changes, under
    // its lock.
    public var executableURL: URL?
    public var arguments: [String] = []
    public var environment: [String: String]?
    /// A `Pipe`, a `FileHandle`, or nil for /dev/null.
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?

    private struct State {
        var pid: pid_t = 0
        var status: Int32?
    }

    private let state = Mutex(State())

    public init() {}

    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    public enum TerminationReason: Sendable { case exit, uncaughtSignal }

    /// Starts the child; throws when it cannot be started.
    public func run() throws {
        guard let path = executableURL?.path else { throw CocoaError(.fileNoSuchFile) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let devNull = open("/dev/null", O_RDWR | O_CLOEXEC)
        defer { if devNull >= 0 { close(devNull) } }
        func descriptor(_ value: Any?, reading: Bool) -> Int32 {
            switch value {
            case let pipe as Pipe:
                reading ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor
            case let handle as FileHandle: handle.fileDescriptor
            default: devNull
            }
        }
        posix_spawn_file_actions_adddup2(&actions, descriptor(standardInput, reading: true), 0)
        posix_spawn_file_actions_adddup2(&actions, descriptor(standardOutput, reading: false), 1)
        posix_spawn_file_actions_adddup2(&actions, descriptor(standardError, reading: false), 2)
        guard Self.addCloseFrom(&actions, 3) == 0 else { throw CocoaError(.featureUnsupported) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The child starts with no signal blocked and every signal at its default action, whatever this
        // process's threads block or handle.
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let environment = (self.environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        state.withLock { $0.pid = pid }
        // This process's copies of the child's ends, as Foundation's `Process` closes them.
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
        if let pipe = standardOutput as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardError as? Pipe { try? pipe.fileHandleForWriting.close() }
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), looked up at run time because
    /// Swift's Glibc module does not declare it.
    private static func addCloseFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32)
        -> Int32
    {
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return -1 }
        return unsafeBitCast(symbol, to: CloseFrom.self)(actions, from)
    }

    public func terminate() { signal(SIGTERM) }
    public func interrupt() { signal(SIGINT) }

    private func signal(_ number: Int32) {
        let (pid, done) = state.withLock { ($0.pid, $0.status != nil) }
        if pid > 0, !done { kill(pid, number) }
    }

    /// Reaps the child without waiting; true while it runs.
    public var isRunning: Bool {
        state.withLock { state in
            guard state.pid > 0, state.status == nil else { return false }
            var status: Int32 = 0
            if waitpid(state.pid, &status, WNOHANG) == state.pid { state.status = status }
            return state.status == nil
        }
    }

    /// Blocks until the child has ended.
    public func waitUntilExit() {
        let pid = state.withLock { $0.status == nil ? $0.pid : 0 }
        guard pid > 0 else { return }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        state.withLock { if $0.status == nil { $0.status = status } }
    }

    private var status: Int32 { state.withLock { $0.status ?? 0 } }

    /// The exit status, or the signal that ended it.
    public var terminationStatus: Int32 {
        let status = self.status
        return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
    }

    public var terminationReason: TerminationReason { status & 0x7f == 0 ? .exit : .uncaughtSignal }
}
