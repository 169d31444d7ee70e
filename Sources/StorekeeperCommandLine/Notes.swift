import Foundation

/// Notes the command line says once per user, not on every run (the ids said are kept, one per line, in
/// `notes-said` under `$STOREKEEPER_STATE_DIR`, else `$XDG_STATE_HOME/storekeeper`, else
/// `~/.local/state/storekeeper`). Where that file cannot be read or written, every note is said.
package enum Notes {
    package static func firstTime(_ id: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> Bool
    {
        guard let folder = directory(environment) else { return true }
        let file = folder.appendingPathComponent("notes-said")
        let said = (try? String(contentsOf: file, encoding: .utf8)).map { $0.split(separator: "\n").map(String.init) }
        if said?.contains(id) == true { return false }
        // A bounded file: past a thousand notes it starts again.
        let kept = (said ?? []).suffix(1_000)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try (kept + [id]).joined(separator: "\n").appending("\n").write(to: file, atomically: true, encoding: .utf8)
        } catch {}
        return true
    }

    static func directory(_ environment: [String: String]) -> URL? {
        if let path = environment["STOREKEEPER_STATE_DIR"], !path.isEmpty { return URL(fileURLWithPath: path) }
        if let path = environment["XDG_STATE_HOME"], path.hasPrefix("/") {
            return URL(fileURLWithPath: path).appendingPathComponent("storekeeper")
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return URL(fileURLWithPath: home).appendingPathComponent(".local/state/storekeeper")
    }
}
