public import Foundation
import StoreModel
import StoreTime
import StorekeeperHTTP
import StorekeeperJSON
import Synchronization

/// Store time followed from an App Store emulator (`serve --clock URL`, config `"clock"`), so that a
/// server rehearsed against the emulator sees the purchases as the emulator does after an `advance`: the
/// wall clock plus the emulator's offset, read from its `GET /_emulator/v1/clock`.
///
/// The emulator's store time runs at the wall clock's pace and only jumps forward (an advance), so one
/// offset describes it: the emulator says it (`offsetMs`), and both clocks read the same wall clock (one
/// machine, or hosts kept in time). A background task reads it again every `interval` (a quarter second by
/// default), and a jump is seen within that. An emulator that does not say its offset is measured instead:
/// its `now` against the middle of the request, kept unless it moved by more than the reading's noise.
public final class FollowedClock: Sendable {
    public let url: String
    private let token: String?
    private let wallClock: @Sendable () -> Date
    private let offset = Atomic<Int64>(0)
    private let task = Mutex<Task<Void, Never>?>(nil)
    private let client = HTTPClient(timeout: .seconds(2), connectTimeout: .seconds(1), maxResponseBytes: 4_096)

    /// Reads the emulator's clock once: an emulator that cannot be reached is an error here, not later.
    /// `token` is the emulator's control-plane token, when it has one.
    public init(url: String, token: String? = nil, wallClock: @escaping @Sendable () -> Date = { Date() })
        async throws(PurchaseServerError)
    {
        var base = url
        while base.hasSuffix("/") { base.removeLast() }
        guard base.hasPrefix("http://") || base.hasPrefix("https://") else {
            throw PurchaseServerError.configuration(
                "clock is the emulator's http(s) URL, such as http://127.0.0.1:8080")
        }
        self.url = base
        self.token = token
        self.wallClock = wallClock
        offset.store(try await read().milliseconds, ordering: .relaxed)
    }

    deinit { task.withLock { $0?.cancel() } }

    /// The largest offset taken from an emulator, in milliseconds (about 300 years).
    static let maxOffset: Int64 = 10_000_000_000_000

    /// Store time now.
    public func now() -> Date {
        let milliseconds = EpochMilliseconds.milliseconds(wallClock()) + offset.load(ordering: .relaxed)
        return EpochMilliseconds.date(milliseconds) ?? .distantFuture
    }

    /// The emulator's store time minus the wall clock, in milliseconds: as the emulator says it (`exact`), or
    /// measured at the middle of the request.
    private func read() async throws(PurchaseServerError) -> (milliseconds: Int64, exact: Bool) {
        var headers: [(name: String, value: String)] = []
        if let token { headers.append(("Authorization", "Bearer " + token)) }
        let before = wallClock()
        let response: HTTPClient.Response
        do { response = try await client.send("GET", url + "/_emulator/v1/clock", headers: headers) } catch {
            throw PurchaseServerError.unavailable(
                "cannot read the emulator's clock at \(HTTPClient.printable(url)): \(error)")
        }
        let after = wallClock()
        let answer = try? JSONParser.parse(response.body)
        guard response.status == 200, let milliseconds = answer?["now"]?.int64Value else {
            throw PurchaseServerError.unavailable(
                "\(HTTPClient.printable(url))/_emulator/v1/clock answered \(response.status), not an emulator's clock")
        }
        let offset: (Int64, Bool)
        if let said = answer?["offsetMs"]?.int64Value {
            offset = (said, true)
        } else {
            let middle = before.addingTimeInterval(after.timeIntervalSince(before) / 2)
            offset = (
                milliseconds.subtractingReportingOverflow(EpochMilliseconds.milliseconds(middle)).partialValue, false
            )
        }
        // The emulator's clock stops before 2049; anything past a few centuries is not a clock.
        guard offset.0 > -Self.maxOffset, offset.0 < Self.maxOffset else {
            throw PurchaseServerError.unavailable(
                "\(HTTPClient.printable(url))/_emulator/v1/clock says an offset of \(offset.0) ms")
        }
        return offset
    }

    /// Reads the clock again now; answers whether the offset changed.
    @discardableResult
    public func refresh() async throws(PurchaseServerError) -> Bool {
        let (measured, exact) = try await read()
        let current = offset.load(ordering: .relaxed)
        let changed = exact ? measured != current : (measured > current + 50 || measured < current - 1_000)
        guard changed else { return false }
        offset.store(measured, ordering: .relaxed)
        return true
    }

    /// Follows the emulator every `interval` until ``stop()``; a failed read keeps the last offset.
    public func start(every interval: Duration = .milliseconds(250)) {
        let next = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self else { return }
                _ = try? await self.refresh()
            }
        }
        task.withLock {
            $0?.cancel()
            $0 = next
        }
    }

    public func stop() { task.withLock { $0?.cancel() } }
}
