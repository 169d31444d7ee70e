public import Foundation

/// Locates the shared test vectors (`../shared/vectors` beside the checkout), which are never copied into
/// the repository. Tests that need them are enabled only when ``isAvailable``.
public enum Vectors {
    /// `STOREKEEPER_VECTORS`, else `<checkout>/../shared/vectors`.
    public static let directory: URL? = {
        if let override = ProcessInfo.processInfo.environment["STOREKEEPER_VECTORS"] {
            return URL(fileURLWithPath: override)
        }
        let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let candidate = checkout.deletingLastPathComponent().appendingPathComponent("shared/vectors")
        return FileManager.default.fileExists(atPath: candidate.appendingPathComponent("README.md").path)
            ? candidate : nil
    }()

    public static var isAvailable: Bool { directory != nil }

    /// Why vector tests are skipped.
    public static let missingMessage =
        "shared/vectors not found beside the checkout (set STOREKEEPER_VECTORS to its path); real-data tests skipped"

    /// The bytes of a vector file, by path relative to `vectors/`.
    public static func bytes(_ relativePath: String) throws -> [UInt8] {
        guard let directory else { throw VectorError(message: missingMessage) }
        return Array(try Data(contentsOf: directory.appendingPathComponent(relativePath)))
    }

    /// The vectors' README text.
    public static func readme() throws -> String {
        String(decoding: try bytes("README.md"), as: UTF8.self)
    }

    public struct VectorError: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }
}

/// The expected values that shared/vectors/README.md lists for each receipt (§1.1–§1.4), read from its
/// tables at test time.
public struct ReceiptVectorIndex: Sendable {
    /// One row of §1.1 joined with §1.2 and §1.3.
    public struct Entry: Sendable {
        public var file: String
        public var receiptType: String
        public var created: String
        public var encoding: String
        public var digest: String
        public var bundleID: String
        public var purchaseCount: Int
        public var byteCount: Int
        /// App-level attributes from "Attributes (decoded from the bytes)": type → text as listed.
        public var attributes: [Int: String] = [:]
        public var absent: [Int] = []
        /// In-app purchase rows: column header (e.g. `1702`) → cell.
        public var purchases: [[String: String]] = []
        /// §1.3: the root file that verifies it at its creation date.
        public var root: String = ""
        /// §1.3: whether it still verifies today.
        public var verifiesNow: Bool = false
    }

    public struct DeviceHashVector: Sendable {
        public var file: String
        public var identifier: [UInt8]
        public var expectedHash: [UInt8]
    }

    public var entries: [Entry] = []
    public var deviceHashes: [DeviceHashVector] = []

    public static func load() throws -> ReceiptVectorIndex {
        try ReceiptVectorIndex(readme: Vectors.readme())
    }

    public init(readme: String) throws {
        let lines = readme.components(separatedBy: "\n")
        func section(_ heading: String) -> ArraySlice<String> {
            guard let start = lines.firstIndex(where: { $0.hasPrefix(heading) }) else { return [] }
            let end =
                lines[(start + 1)...].firstIndex(where: { $0.hasPrefix("### ") || $0.hasPrefix("## ") })
                ?? lines.endIndex
            return lines[start..<end]
        }
        for row in Self.tableRows(section("### 1.1")) where row.count >= 11 {
            entries.append(
                Entry(
                    file: Self.code(row[1]), receiptType: Self.code(row[2]), created: Self.code(row[4]),
                    encoding: row[5], digest: row[6], bundleID: Self.code(row[8]), purchaseCount: Int(row[9]) ?? -1,
                    byteCount: Int(row[10]) ?? -1))
        }
        for row in Self.tableRows(section("### 1.3")) where row.count >= 6 {
            let file = Self.code(row[0])
            guard let index = entries.firstIndex(where: { $0.file == file }) else { continue }
            entries[index].root = Self.code(row[2])
            entries[index].verifiesNow = row[5].hasPrefix("verifies")
        }
        for row in Self.tableRows(section("### 1.4")) where row.count >= 7 {
            deviceHashes.append(
                DeviceHashVector(
                    file: Self.code(row[0]), identifier: Self.hex(Self.code(row[3])),
                    expectedHash: Self.hex(Self.code(row[6]))))
        }
        // §1.2: one block per receipt.
        var current: Int?
        var header: [String] = []
        for line in section("### 1.2") {
            if line.hasPrefix("- **Files:**") {
                let file = line.components(separatedBy: "`").dropFirst().first ?? ""
                current = entries.firstIndex(where: { "receipts/" + $0.file == file })
                header = []
            } else if let index = current, line.hasPrefix("- **Attributes (decoded from the bytes):**") {
                let body = line.replacingOccurrences(of: "- **Attributes (decoded from the bytes):** ", with: "")
                for part in body.components(separatedBy: "; ") {
                    let trimmed = part.trimmingCharacters(in: CharacterSet(charactersIn: ". "))
                    if trimmed.hasPrefix("Absent:") {
                        entries[index].absent = trimmed.dropFirst(7).split(separator: ",").compactMap {
                            Int($0.trimmingCharacters(in: .whitespaces))
                        }
                    } else if let colon = trimmed.firstIndex(of: ":"), let type = Int(trimmed[..<colon]) {
                        entries[index].attributes[type] = trimmed[trimmed.index(after: colon)...]
                            .trimmingCharacters(in: .whitespaces)
                    }
                }
            } else if let index = current, line.hasPrefix("|") {
                let cells = Self.cells(line)
                if cells.first == "#" {
                    header = cells.map { $0.components(separatedBy: " ").first ?? $0 }
                } else if !header.isEmpty, let first = cells.first, Int(first) != nil {
                    var row: [String: String] = [:]
                    for (column, cell) in zip(header, cells) { row[column] = cell }
                    entries[index].purchases.append(row)
                }
            }
        }
    }

    static func cells(_ line: String) -> [String] {
        var parts = line.split(separator: "|", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        if parts.first == "" { parts.removeFirst() }
        if parts.last == "" { parts.removeLast() }
        return parts
    }

    static func tableRows(_ lines: ArraySlice<String>) -> [[String]] {
        lines.filter { $0.hasPrefix("|") && !$0.hasPrefix("|---") }.dropFirst().map(cells)
    }

    /// The text between the first pair of backticks, or the cell itself.
    public static func code(_ cell: String) -> String {
        let parts = cell.components(separatedBy: "`")
        return parts.count >= 3 ? parts[1] : cell
    }

    public static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = text.makeIterator()
        while let high = iterator.next(), let low = iterator.next(), let byte = UInt8(String([high, low]), radix: 16) {
            bytes.append(byte)
        }
        return bytes
    }
}
