/// What one SQL statement has cost a connection while it counted (``calls`` and the thread's ``cpu`` time
/// in them: binding, stepping, reading the rows): where a writer's time goes, statement by statement.
public struct StatementCost: Sendable, Equatable {
    public var sql: String
    public var calls: Int
    public var cpu: Duration

    public init(sql: String, calls: Int, cpu: Duration) {
        self.sql = sql
        self.calls = calls
        self.cpu = cpu
    }
}
