internal import CStorekeeperHTTPServer
import StorekeeperCommandLine
import StorekeeperHTTP

/// Bare libmicrohttpd answering one fixed response with the same daemon flags and pool as ``HTTPServer``:
/// the baseline that `storekeeper bench http` measures the HTTP layer against, in the same run.
final class BareBaseline: Sendable {
    // @unchecked Sendable: the pointer is only passed to sk_baseline_stop, once, from deinit.
    private struct Raw: @unchecked Sendable {
        let pointer: OpaquePointer  // sk_baseline
    }

    private let raw: Raw
    let port: Int

    /// `limits` gives the connection memory the measured server uses (its header and URL limits).
    init(response: HTTPResponse, limits: HTTPLimits = HTTPLimits(), threads: Int = 0) throws {
        let contentType = response.header("Content-Type") ?? "application/octet-stream"
        guard
            let pointer = response.body.withUnsafeBufferPointer({ body in
                sk_baseline_start(
                    0, UInt32(clamping: threads), limits.connectionMemory, body.baseAddress, body.count, contentType)
            })
        else { throw HTTPError(status: 0, code: "listen_failed", message: "the baseline server did not start") }
        raw = Raw(pointer: pointer)
        port = Int(sk_baseline_port(pointer))
    }

    deinit { sk_baseline_stop(raw.pointer) }
}
