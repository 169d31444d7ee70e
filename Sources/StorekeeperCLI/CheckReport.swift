import StorekeeperCommandLine
import StorekeeperJSON

/// Which checks a verification ran, passed, failed or skipped (and why): printed with every verdict so
/// that a `valid` never hides a check nobody asked for.
struct CheckReport {
    enum Result {
        case passed, failed, notRun
        case skipped(String)

        var text: String {
            switch self {
            case .passed: "passed"
            case .failed: "failed"
            case .notRun: "not run (an earlier check failed)"
            case .skipped(let why): "skipped: \(why)"
            }
        }
    }

    var rows: [(name: String, result: Result)] = []

    /// `checks` in order; the one named `failed` failed, those after it did not run; `skipped` ones say why.
    init(_ checks: [String], failed: String?, skipped: [String: String]) {
        var after = false
        for check in checks {
            if let reason = skipped[check] {
                rows.append((check, .skipped(reason)))
            } else if after {
                rows.append((check, .notRun))
            } else if check == failed {
                rows.append((check, .failed))
                after = true
            } else {
                rows.append((check, .passed))
            }
        }
    }

    var json: JSONValue {
        var object = JSONObject()
        for row in rows { object[row.name] = .string(row.result.text) }
        return .object(object)
    }

    var text: String {
        rows.map { row in
            let mark =
                switch row.result {
                case .passed: "ok  "
                case .failed: "FAIL"
                case .notRun, .skipped: "--  "
                }
            return "  \(mark) \(row.name)" + (row.result.isPassed ? "" : ": \(row.result.text)") + "\n"
        }.joined()
    }
}

extension CheckReport.Result {
    var isPassed: Bool {
        if case .passed = self { return true }
        return false
    }
}
