import Foundation
import StorekeeperCLI
import StorekeeperCommandLine

#if canImport(Glibc)
    import Glibc

    // glibc gives each thread that allocates its own arena (up to eight per core); with requests and
    // deliveries on many short-lived dispatch threads, 14 KB notification bodies fragmented them until
    // `bench lifecycle` held 267 MiB where a few arenas hold 97 MiB for the same work. Four keep the
    // allocator's contention low on a small machine; MALLOC_ARENA_MAX in the environment still wins.
    // (mallopt is looked up because Glibc's Swift module does not bring <malloc.h>.)
    if ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil, let symbol = dlsym(nil, "mallopt") {
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let arenaMax: Int32 = -8  // M_ARENA_MAX
        _ = unsafeBitCast(symbol, to: Mallopt.self)(arenaMax, 4)
    }
#endif

// SIGINT and SIGTERM go to one thread from here on: a server waits for them without holding a thread of
// Swift's pool; any other command ends as their default action ends it.
TerminationSignals.install()
exit(await Storekeeper.run(Array(CommandLine.arguments.dropFirst())))
