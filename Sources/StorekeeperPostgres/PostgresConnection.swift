internal import CStorekeeperPostgres
import Foundation
public import StorekeeperSQL

/// One libpq connection. Not thread-safe: ``PostgresDatabase`` confines each to its own serial executor.
///
/// Statements are written with `?` placeholders, as for SQLite, and prepared once per connection (named
/// server-side statements); values go as text except `bytea`, which goes and comes back as bytes.
public final class PostgresConnection {
    private let handle: OpaquePointer  // PGconn, owned
    /// Prepared statement names by SQL text and value types.
    private var statements: [String: String] = [:]
    /// Prepared statements a connection keeps at most (then all are deallocated).
    public static let statementLimit = 256
    /// Statement names given so far on this connection.
    private var statementsNamed = 0
    /// Rows the last statement changed.
    public private(set) var changes = 0

    /// TCP settings that bound a wait on a server that went away without closing the connection (a failover, a
    /// dead host): keepalives probe an idle connection after 10 s, every 5 s, 3 times; data sent and not
    /// acknowledged for 35 s ends it. Without them a blocked call waits for the kernel, 15 minutes to 2 hours.
    /// Given before the URL, so that the URL's own values win.
    static let transportOptions: [(String, String)] = [
        ("keepalives", "1"), ("keepalives_idle", "10"), ("keepalives_interval", "5"), ("keepalives_count", "3"),
        ("tcp_user_timeout", "35000"),
    ]

    /// Opens a connection to `url` (`postgres://user:password@host:port/database?…`, or libpq's
    /// `key=value` form). Statements are bounded: `statement_timeout` 30 s, and a transaction left idle is
    /// ended after 60 s; a server gone silent is given up within about 40 s (``transportOptions``).
    public init(url: String, connectTimeoutSeconds: Int = 10) throws(PostgresError) {
        let keys = Self.transportOptions.map(\.0) + ["dbname", "connect_timeout", "application_name", "options"]
        let values =
            Self.transportOptions.map(\.1) + [
                url, String(connectTimeoutSeconds), "storekeeper",
                "-c statement_timeout=30000 -c idle_in_transaction_session_timeout=60000",
            ]
        let connection = Self.withCStrings(keys) { keys in
            Self.withCStrings(values) { values in PQconnectdbParams(keys, values, 1) }
        }
        guard let connection else { throw PostgresError(.connection, "out of memory") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = PostgresDatabase.scrubbed(Self.trimmed(PQerrorMessage(connection)), url: url)
            PQfinish(connection)
            throw PostgresError(.connection, message)
        }
        handle = connection
        // The server's notices (NOTICE, WARNING) are not errors: libpq would print them on stderr.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit { PQfinish(handle) }

    /// The value libpq uses for connection option `name` (e.g. `keepalives_idle`), nil when it has none.
    public func option(_ name: String) -> String? {
        guard let options = PQconninfo(handle) else { return nil }
        defer { PQconninfoFree(options) }
        var index = 0
        while let keyword = options[index].keyword {
            if String(cString: keyword) == name { return options[index].val.map { String(cString: $0) } }
            index += 1
        }
        return nil
    }

    /// Whether libpq still considers the connection usable.
    public var isOpen: Bool { !broken && PQstatus(handle) == CONNECTION_OK }
    /// Set when the connection could not leave pipeline mode: it is then treated as lost.
    private var broken = false

    /// Runs statements without values (one or several separated by `;`), as a script. In a pipelined
    /// transaction, what was sent before is answered first (a script cannot be pipelined).
    public func executeScript(_ sql: String) throws(PostgresError) {
        if pipelined {
            // Its synchronisation would answer reads sent ahead and lose their place.
            precondition(setsSent.isEmpty, "reads sent ahead are not answered yet: synchronizeReadAheads() first")
            rowsReadAhead = []
            try synchronize()
            PQexitPipelineMode(handle)
            defer { PQenterPipelineMode(handle) }
            roundTrips += 1
            guard let result = PQexec(handle, sql) else { throw connectionError() }
            defer { PQclear(result) }
            do { try check(result) } catch {
                if transactionFailure == nil { transactionFailure = error }
                throw error
            }
            return
        }
        roundTrips += 1
        guard let result = PQexec(handle, sql) else { throw connectionError() }
        defer { PQclear(result) }
        try check(result)
    }

    // MARK: Pipelined transactions

    /// Statements sent in pipeline mode whose results are not read yet, in order.
    private var unanswered: [Sent] = []
    private struct Sent {
        /// The statement, for an error's text; nil for a transaction's own statements.
        let sql: String?
        /// The prepared statement's cache key when this is its preparation (forgotten if it fails).
        let preparing: String?
        /// Whether its result is answered by ``synchronizeKeeping()``.
        var keep = false
        /// Filled with the rows it changed when its result is read (``executeCounted(_:_:)``).
        var count: DeferredCount?
        /// Whether this is a `DEALLOCATE ALL` sent in the pipeline (``makeRoom()``).
        var deallocating = false
    }
    /// Whether a `DEALLOCATE ALL` sent in a pipeline did not run (an earlier statement aborted the
    /// pipeline): the server may still hold what the cache forgot, so the next preparation deallocates first.
    private var deallocationMissed = false
    /// Rows read ahead in the open pipelined transaction (``readAhead(_:)``), each answered once to the
    /// same statement with the same values, until a statement that may write is sent.
    private var rowsReadAhead: [(sql: String, values: [SQLValue], rows: [Row])] = []
    /// The first statement that failed in the open pipelined transaction.
    private var transactionFailure: PostgresError?
    /// Sets of reads sent with ``readAheadLater(_:)`` and not answered yet: each set's size, in order.
    private var setsSent: [[(sql: String, values: [SQLValue])]] = []
    /// Sets of reads answered by ``synchronizeReadAheads()``, made current by ``useReadAhead(_:)``.
    private var setsRead: [[(sql: String, values: [SQLValue], rows: [Row])]] = []
    /// Statements sent with ``executeLater(_:_:once:)`` in the open pipelined transaction.
    private var sentOnce: [(sql: String, values: [SQLValue])] = []
    /// Whether the connection is in pipeline mode (between ``beginPipelined(_:)`` and
    /// ``commitPipelined()`` or ``abandonPipeline()``).
    public private(set) var pipelined = false
    /// Times this connection waited for the server: one per statement run alone, one per pipeline
    /// synchronisation however many statements it answers.
    public private(set) var roundTrips = 0

    /// Starts a transaction with `begin` in pipeline mode (libpq's): `begin`, and statements sent with
    /// ``executeLater(_:_:)``, go with the next statement whose rows are needed, in one round trip.
    public func beginPipelined(_ begin: String) throws(PostgresError) {
        precondition(!pipelined && unanswered.isEmpty, "a pipelined transaction is already open")
        guard PQenterPipelineMode(handle) == 1 else { throw connectionError() }
        pipelined = true
        transactionFailure = nil
        rowsReadAhead = []
        sentOnce = []
        (setsSent, setsRead) = ([], [])
        try send(nil) { PQsendQueryParams(handle, begin, 0, nil, nil, nil, nil, 0) }
    }

    /// Sends `COMMIT` with whatever is still unanswered, waits once for all of it and leaves pipeline mode.
    /// Throws the first failure among them (the transaction is then not committed).
    public func commitPipelined() throws(PostgresError) {
        precondition(pipelined, "no pipelined transaction is open")
        // After a pipeline lost its place, results no longer line up: nothing is committed.
        if broken { throw PostgresError(.connection, "the connection lost its place; nothing was committed") }
        rowsReadAhead = []
        sentOnce = []
        (setsSent, setsRead) = ([], [])
        try send(nil) { PQsendQueryParams(handle, "COMMIT", 0, nil, nil, nil, nil, 0) }
        let result = try synchronize(keepingLast: true)
        defer { if let result { PQclear(result) } }
        if PQexitPipelineMode(handle) != 1 { broken = true }
        pipelined = false
        // A statement that failed earlier, even one whose error the caller caught, left the transaction
        // aborted: COMMIT then rolls back without an error of its own.
        if let failure = transactionFailure { throw failure }
        guard let result, String(cString: PQcmdStatus(result)) == "COMMIT" else {
            throw PostgresError(.server, sqlState: "40000", "the transaction was rolled back, not committed")
        }
    }

    /// Reads and drops whatever is unanswered and leaves pipeline mode (after a failure, before
    /// `ROLLBACK`). Nothing happens outside pipeline mode.
    public func abandonPipeline() {
        guard pipelined else { return }
        if !unanswered.isEmpty { _ = try? synchronize() }
        unanswered = []
        rowsReadAhead = []
        sentOnce = []
        (setsSent, setsRead) = ([], [])
        if PQexitPipelineMode(handle) != 1 { broken = true }
        pipelined = false
    }

    /// Runs a statement whose rows and count are not needed. In a pipelined transaction it is only sent:
    /// it runs, in order, when the next statement whose rows are needed (or `COMMIT`) is answered, and its
    /// failure is thrown there. Otherwise it runs now.
    public func executeLater(_ sql: String, _ values: [SQLValue] = []) throws(PostgresError) {
        guard pipelined else {
            try execute(sql, values)
            return
        }
        rowsReadAhead = []
        try sendPrepared(sql, values)
    }

    /// ``executeLater(_:_:)``, except that in a pipelined transaction a statement sent so before with the
    /// same values is not sent again, and the rows read ahead stay: for a statement whose second run would
    /// change nothing, as taking an advisory lock the transaction already holds.
    public func executeLater(_ sql: String, _ values: [SQLValue], once: Bool) throws(PostgresError) {
        guard once, pipelined else { return try executeLater(sql, values) }
        if sentOnce.contains(where: { $0.sql == sql && $0.values == values }) { return }
        try executeLater(sql, values)
        sentOnce.append((sql, values))
    }

    /// Runs a statement whose count of changed rows is wanted only once the transaction is over. In a
    /// pipelined transaction it is only sent, like ``executeLater(_:_:)``: the count is filled when the
    /// next statement whose rows are needed (or `COMMIT`) is answered. Otherwise it runs now.
    public func executeCounted(_ sql: String, _ values: [SQLValue] = []) throws(PostgresError) -> DeferredCount {
        guard pipelined else {
            try execute(sql, values)
            return DeferredCount(changes)
        }
        let count = DeferredCount()
        try executeLater(sql, values)
        unanswered[unanswered.count - 1].count = count
        return count
    }

    /// Sends a statement in pipeline mode, remembering it as unanswered.
    private func send(_ sent: Sent?, _ call: () -> Int32) throws(PostgresError) {
        guard call() == 1 else { throw connectionError() }
        unanswered.append(sent ?? Sent(sql: nil, preparing: nil))
    }

    /// Marks a synchronisation point, then reads every unanswered result in order: the last statement's
    /// result is answered (the caller clears it), the first failure thrown once all are read.
    @discardableResult
    private func synchronize(keepingLast: Bool = false) throws(PostgresError) -> OpaquePointer? {
        if keepingLast, !unanswered.isEmpty { unanswered[unanswered.count - 1].keep = true }
        var kept = try synchronizeKeeping()
        // Only the last is asked for (others kept are from a read-ahead that failed while sending).
        let last = keepingLast ? kept.popLast() : nil
        for result in kept { PQclear(result) }
        return last
    }

    /// Marks a synchronisation point, then reads every unanswered result in order: the results of those
    /// marked `keep` are answered in order (the caller clears them), the first failure thrown once all are
    /// read.
    private func synchronizeKeeping() throws(PostgresError) -> [OpaquePointer] {
        roundTrips += 1
        let sent = unanswered
        unanswered = []
        guard PQpipelineSync(handle) == 1 else { throw forget(sent[...], connectionError()) }
        var read = 0
        var failure: PostgresError?
        var kept: [OpaquePointer] = []
        for statement in sent {
            guard let result = PQgetResult(handle) else {
                for result in kept { PQclear(result) }
                throw forget(sent[read...], connectionError())
            }
            read += 1
            // Each statement's results end with a null.
            while let extra = PQgetResult(handle) { PQclear(extra) }
            let status = PQresultStatus(result)
            let succeeded = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY
            // A preparation that did not run leaves no statement: it is prepared again when next used.
            if !succeeded, let key = statement.preparing { statements[key] = nil }
            if !succeeded, statement.deallocating { deallocationMissed = true }
            if failure == nil, status != PGRES_PIPELINE_ABORTED {
                do { try check(result, sql: statement.sql) } catch { failure = error }
            }
            if succeeded, let count = statement.count { count.fill(Int(String(cString: PQcmdTuples(result))) ?? 0) }
            if statement.keep && failure == nil {
                kept.append(result)
            } else {
                PQclear(result)
            }
        }
        guard let sync = PQgetResult(handle) else {
            for result in kept { PQclear(result) }
            throw forget([][...], connectionError())
        }
        let synced = PQresultStatus(sync) == PGRES_PIPELINE_SYNC
        PQclear(sync)
        if let failure {
            for result in kept { PQclear(result) }
            if transactionFailure == nil { transactionFailure = failure }
            throw failure
        }
        guard synced else {
            for result in kept { PQclear(result) }
            broken = true
            throw PostgresError(.connection, "the pipeline lost its place")
        }
        return kept
    }

    /// Runs `statements` (reads) now, in one round trip with whatever is unanswered, and keeps their rows:
    /// the same statement with the same values is then answered from them, once, with no round trip, until
    /// something that may write is sent. Does nothing outside a pipelined transaction.
    public func readAhead(_ statements: [(sql: String, values: [SQLValue])]) throws(PostgresError) {
        guard pipelined, !statements.isEmpty else { return }
        // Every one read ahead already and not answered yet: their rows are still the current ones.
        let held = statements.allSatisfy { statement in
            rowsReadAhead.contains { $0.sql == statement.sql && $0.values == statement.values }
        }
        if held { return }
        let set = try readAheadLater(statements)
        try synchronizeReadAheads()
        useReadAhead(set)
    }

    /// Sends `statements` (reads) without waiting, as one set among others: one round trip answers every set
    /// sent so (``synchronizeReadAheads()``), and ``useReadAhead(_:)`` then makes a set's rows the ones
    /// ``execute(_:_:)`` answers, as ``readAhead(_:)`` would have. For several writes in one transaction,
    /// each reading ahead what no other of them writes. Answers the set's number; in a pipelined transaction
    /// only.
    public func readAheadLater(_ statements: [(sql: String, values: [SQLValue])]) throws(PostgresError) -> Int {
        precondition(pipelined, "no pipelined transaction is open")
        rowsReadAhead = []
        try sendKept(statements)
        setsSent.append(statements)
        return setsRead.count + setsSent.count - 1
    }

    /// Sends `statements` with their results marked to be answered (by ``synchronizeKeeping()``); none stays
    /// marked when one cannot be sent.
    private func sendKept(_ statements: [(sql: String, values: [SQLValue])]) throws(PostgresError) {
        do {
            for statement in statements {
                try sendPrepared(statement.sql, statement.values)
                unanswered[unanswered.count - 1].keep = true
            }
        } catch {
            for index in unanswered.indices { unanswered[index].keep = false }
            throw error
        }
    }

    /// Deallocates every prepared statement when the cache is full, before a new one is prepared. In a
    /// pipelined transaction `DEALLOCATE ALL` is only sent, like any statement there: what was sent before
    /// it runs first, under the names it was prepared with, and nothing unanswered is answered early (a
    /// synchronisation here would answer the reads sent ahead and lose their place).
    private func makeRoom() throws(PostgresError) {
        guard deallocationMissed || statements.count >= Self.statementLimit else { return }
        if pipelined {
            var sent = Sent(sql: "DEALLOCATE ALL", preparing: nil)
            sent.deallocating = true
            try send(sent) { PQsendQueryParams(handle, "DEALLOCATE ALL", 0, nil, nil, nil, nil, 0) }
        } else {
            try executeScript("DEALLOCATE ALL")
        }
        statements.removeAll()
        deallocationMissed = false
    }

    /// Answers every set sent with ``readAheadLater(_:)``, and whatever else is unanswered, in one round trip.
    public func synchronizeReadAheads() throws(PostgresError) {
        guard !setsSent.isEmpty else { return }
        let sets = setsSent
        setsSent = []
        let results = try synchronizeKeeping()
        defer { for result in results { PQclear(result) } }
        let expected = sets.reduce(0) { $0 + $1.count }
        guard results.count == expected else {
            broken = true
            throw PostgresError(.connection, "the pipeline answered \(results.count) of \(expected) reads")
        }
        var next = 0
        for set in sets {
            setsRead.append(
                set.map { statement in
                    defer { next += 1 }
                    return (statement.sql, statement.values, Self.rows(results[next]))
                })
        }
    }

    /// Makes set `number`'s rows (``readAheadLater(_:)``, answered) the ones read ahead, in place of any.
    public func useReadAhead(_ number: Int) {
        precondition(setsRead.indices.contains(number), "set \(number) was not answered")
        rowsReadAhead = setsRead[number]
        setsRead[number] = []
    }

    /// Statements whose results were never read: what they prepared may not exist, so it is prepared again
    /// when next used. Answers `error`.
    private func forget(_ sent: ArraySlice<Sent>, _ error: PostgresError) -> PostgresError {
        for statement in sent {
            if let key = statement.preparing { statements[key] = nil }
            if statement.deallocating { deallocationMissed = true }
        }
        // The pipeline lost its place: the connection is not used again.
        broken = true
        return error
    }

    /// Runs one statement with its values and answers every row.
    @discardableResult
    public func execute(_ sql: String, _ values: [SQLValue] = []) throws(PostgresError) -> [Row] {
        if pipelined, !rowsReadAhead.isEmpty {
            if let index = rowsReadAhead.firstIndex(where: { $0.sql == sql && $0.values == values }) {
                let rows = rowsReadAhead.remove(at: index).rows
                changes = rows.count
                return rows
            }
            if !sql.hasPrefix("SELECT") { rowsReadAhead = [] }
        }
        // Its synchronisation would answer reads sent ahead and lose their place: checked before anything is sent.
        precondition(
            !pipelined || setsSent.isEmpty, "reads sent ahead are not answered yet: synchronizeReadAheads() first")
        let (types, formats, buffers) = Self.parameters(values)
        let name = try prepared(sql, types: types)
        if pipelined {
            try sendPrepared(name: name, sql: sql, buffers: buffers, formats: formats)
            guard let result = try synchronize(keepingLast: true) else {
                throw PostgresError(.connection, "the pipeline answered nothing")
            }
            defer { PQclear(result) }
            changes = Int(String(cString: PQcmdTuples(result))) ?? 0
            return Self.rows(result)
        }
        roundTrips += 1
        let result = Self.withParameters(buffers, formats) { pointers, lengths, formats in
            PQexecPrepared(handle, name, Int32(buffers.count), pointers, lengths, formats, 0)
        }
        guard let result else { throw connectionError() }
        defer { PQclear(result) }
        try check(result, sql: sql)
        changes = Int(String(cString: PQcmdTuples(result))) ?? 0
        return Self.rows(result)
    }

    /// The values of a statement as libpq takes them: parameter types, formats and bytes.
    private static func parameters(_ values: [SQLValue]) -> (types: [UInt32], formats: [Int32], buffers: [[UInt8]?]) {
        var types: [UInt32] = []
        var formats: [Int32] = []
        var buffers: [[UInt8]?] = []
        types.reserveCapacity(values.count)
        for value in values {
            switch value {
            case .null:
                types.append(0)
                formats.append(0)
                buffers.append(nil)
            case .integer(let number):
                types.append(20)  // int8
                formats.append(0)
                buffers.append(Array(String(number).utf8) + [0])
            case .real(let number):
                types.append(701)  // float8
                formats.append(0)
                buffers.append(Array(Self.text(number).utf8) + [0])
            case .text(let string):
                types.append(0)  // inferred from the statement
                formats.append(0)
                buffers.append(Array(string.utf8) + [0])
            case .blob(let bytes):
                types.append(17)  // bytea, sent as bytes
                formats.append(1)
                buffers.append(bytes)
            }
        }
        return (types, formats, buffers)
    }

    /// Calls `body` with the values as libpq's arrays of pointers, lengths and formats (copies that live
    /// for the call).
    private static func withParameters<R>(
        _ buffers: [[UInt8]?], _ formats: [Int32],
        _ body: (UnsafePointer<UnsafePointer<CChar>?>, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
    ) -> R {
        let lengths = buffers.map { Int32($0?.count ?? 0) }
        let pointers = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: max(buffers.count, 1))
        var owned: [UnsafeMutableRawPointer] = []
        defer {
            for pointer in owned { pointer.deallocate() }
            pointers.deallocate()
        }
        for (index, buffer) in buffers.enumerated() {
            guard let buffer else {
                pointers[index] = nil
                continue
            }
            let copy = UnsafeMutableRawPointer.allocate(byteCount: max(buffer.count, 1), alignment: 1)
            buffer.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            owned.append(copy)
            pointers[index] = UnsafePointer(copy.assumingMemoryBound(to: CChar.self))
        }
        return lengths.withUnsafeBufferPointer { lengths in
            formats.withUnsafeBufferPointer { formats in body(pointers, lengths.baseAddress, formats.baseAddress) }
        }
    }

    /// Sends a statement in pipeline mode (prepared first when new), unanswered.
    private func sendPrepared(_ sql: String, _ values: [SQLValue]) throws(PostgresError) {
        let (types, formats, buffers) = Self.parameters(values)
        let name = try prepared(sql, types: types)
        try sendPrepared(name: name, sql: sql, buffers: buffers, formats: formats)
    }

    private func sendPrepared(name: String, sql: String, buffers: [[UInt8]?], formats: [Int32]) throws(PostgresError) {
        try send(Sent(sql: sql, preparing: nil)) {
            Self.withParameters(buffers, formats) { pointers, lengths, formats in
                PQsendQueryPrepared(handle, name, Int32(buffers.count), pointers, lengths, formats, 0)
            }
        }
    }

    private func prepared(_ sql: String, types: [UInt32]) throws(PostgresError) -> String {
        let key = types.map(String.init).joined(separator: ",") + "|" + sql
        if let name = statements[key] { return name }
        try makeRoom()
        // Never a name used before on this connection: a preparation forgotten after a failed pipeline may
        // still exist on the server.
        statementsNamed += 1
        let name = "sk\(statementsNamed)"
        let text = Self.numberedPlaceholders(sql)
        if pipelined {
            // Prepared in the pipeline, ahead of its first use.
            try send(Sent(sql: sql, preparing: key)) {
                types.withUnsafeBufferPointer { PQsendPrepare(handle, name, text, Int32(types.count), $0.baseAddress) }
            }
            statements[key] = name
            return name
        }
        roundTrips += 1
        guard
            let result = types.withUnsafeBufferPointer({
                PQprepare(handle, name, text, Int32(types.count), $0.baseAddress)
            })
        else { throw connectionError() }
        defer { PQclear(result) }
        try check(result, sql: sql)
        statements[key] = name
        return name
    }

    private func check(_ result: OpaquePointer, sql: String? = nil) throws(PostgresError) {
        let status = PQresultStatus(result)
        guard status != PGRES_COMMAND_OK, status != PGRES_TUPLES_OK, status != PGRES_EMPTY_QUERY else { return }
        let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let message = Self.trimmed(PQresultErrorMessage(result))
        let kind: PostgresError.Kind = isOpen ? .server : .connection
        throw PostgresError(kind, sqlState: state, message + (sql.map { " in `\(Self.shortened($0))`" } ?? ""))
    }

    private func connectionError() -> PostgresError {
        PostgresError(.connection, Self.trimmed(PQerrorMessage(handle)))
    }

    private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        guard let message else { return "unknown error" }
        return String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func shortened(_ sql: String) -> String {
        let line = sql.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: " ")
        return line.count > 120 ? String(line.prefix(117)) + "..." : line
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R)
        -> R
    {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        let pointers = copies.map { UnsafePointer($0) } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

extension PostgresConnection: MigrationConnection {}
