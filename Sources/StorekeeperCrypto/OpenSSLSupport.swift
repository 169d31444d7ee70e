internal import CStorekeeperOpenSSL

/// Runs `body` with a read-only memory BIO over `bytes`.
func withMemoryBIO<T>(_ bytes: [UInt8], _ body: (OpaquePointer) throws -> T) throws -> T {
    try bytes.withUnsafeBytes { buffer in
        guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else {
            throw CryptoError.openSSL("BIO_new_mem_buf")
        }
        defer { BIO_free(bio) }
        return try body(bio)
    }
}

/// Runs `body` with a writable memory BIO and returns what it wrote.
func collectingBIO(_ body: (OpaquePointer) throws -> Bool) throws -> [UInt8] {
    guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError.openSSL("BIO_new") }
    defer { BIO_free(bio) }
    guard try body(bio) else { throw CryptoError.openSSL("writing to a memory BIO") }
    var data: UnsafeMutablePointer<CChar>?
    let length = shim_BIO_get_mem_data(bio, &data)
    guard length > 0, let data else { return [] }
    return data.withMemoryRebound(to: UInt8.self, capacity: length) {
        Array(UnsafeBufferPointer(start: $0, count: length))
    }
}

/// Calls an OpenSSL `i2d_*` function twice (size, then bytes).
func derEncode(_ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) throws -> [UInt8] {
    let size = encode(nil)
    guard size > 0 else { throw CryptoError.openSSL("DER encoding") }
    var output = [UInt8](repeating: 0, count: Int(size))
    let written = output.withUnsafeMutableBufferPointer { buffer -> Int32 in
        var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
        return encode(&cursor)
    }
    guard written == size else { throw CryptoError.openSSL("DER encoding") }
    return output
}

/// Seconds since 1970 of an `ASN1_TIME`.
func secondsSince1970(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
    guard let time, let epoch = ASN1_TIME_set(nil, 0) else { return nil }
    defer { ASN1_TIME_free(epoch) }
    var days: Int32 = 0
    var seconds: Int32 = 0
    guard ASN1_TIME_diff(&days, &seconds, epoch, time) == 1 else { return nil }
    return Int64(days) * 86_400 + Int64(seconds)
}
