import Testing

@testable import AppStoreEmulator

/// The Server API's history pages: how many rows a page keeps, and where the next one starts.
@Suite("App Store Server API history pages")
struct HistoryScanTests {
    /// Rows at positions 1...count, each its own position.
    static func fetch(count: Int64) -> (Int64?, Int) -> [(position: Int64, row: Int64)] {
        { after, limit in
            let first = (after ?? 0) + 1
            guard first <= count else { return [] }
            return (first...min(count, first + Int64(limit) - 1)).map { ($0, $0) }
        }
    }

    @Test("A page keeps at most its size of the rows accepted, 20 by default, and the next starts after it")
    func pageSizes() {
        let rows = Self.fetch(count: 250)
        let even: (Int64) -> Bool = { $0 % 2 == 0 }
        let first = ServerAPIService.scanPage(from: nil, fetch: rows, accepts: even)
        #expect(first.rows == Array(stride(from: 2, through: 40, by: 2)))
        #expect(first.hasMore && first.position == 41)
        // The rest of 50, as the deprecated refund lookup asks for it: exactly that many, none more.
        let rest = ServerAPIService.scanPage(from: first.position, size: 30, fetch: rows, accepts: even)
        #expect(rest.rows == Array(stride(from: 42, through: 100, by: 2)))
        #expect(rest.hasMore && rest.position == 101)
        // Past the end: what is left, and no more.
        let last = ServerAPIService.scanPage(from: 240, size: 30, fetch: rows, accepts: even)
        #expect(last.rows == [242, 244, 246, 248, 250])
        #expect(!last.hasMore)
    }
}
