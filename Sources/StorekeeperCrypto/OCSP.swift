internal import CStorekeeperOpenSSL
public import Foundation

/// OCSP (RFC 6960) requests and responses through OpenSSL; the HTTP exchange is the caller's.
public enum OCSP {
    /// A DER `OCSPRequest` for `certificate` (CertID hashed with SHA-256, as Apple's Python library does) and
    /// the responder URL from its Authority Information Access, if any.
    public static func request(for certificate: Certificate, issuer: Certificate) throws -> (der: [UInt8], url: String?)
    {
        guard let request = OCSP_REQUEST_new() else { throw CryptoError.openSSL("OCSP_REQUEST_new") }
        defer { OCSP_REQUEST_free(request) }
        guard let id = OCSP_cert_to_id(DigestAlgorithm.sha256.md, certificate.x509, issuer.x509) else {
            throw CryptoError.openSSL("OCSP_cert_to_id")
        }
        guard OCSP_request_add0_id(request, id) != nil else {
            OCSP_CERTID_free(id)
            throw CryptoError.openSSL("OCSP_request_add0_id")
        }
        let der = try derEncode { i2d_OCSP_REQUEST(request, $0) }
        return (der, responderURL(certificate))
    }

    /// The outcome of checking a response.
    public enum Status: Sendable, Equatable {
        case good
        case revoked
        /// Malformed, unsigned by the issuer (or its delegate), not about this certificate, or stale.
        case invalid(String)
    }

    /// Checks a DER `OCSPResponse` for `certificate`: successful, signed by the issuer or a responder it
    /// delegated to (chaining to `root`), a GOOD single response for this certificate, current at `now`.
    public static func evaluate(
        response der: [UInt8], certificate: Certificate, issuer: Certificate, root: Certificate, now: Date
    ) -> Status {
        let response: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_OCSP_RESPONSE(nil, &cursor, buffer.count)
        }
        guard let response else { return .invalid("not an OCSP response: \(drainOpenSSLErrors())") }
        defer { OCSP_RESPONSE_free(response) }
        guard OCSP_response_status(response) == OCSP_RESPONSE_STATUS_SUCCESSFUL else {
            return .invalid("OCSP response status \(OCSP_response_status(response))")
        }
        guard let basic = OCSP_response_get1_basic(response) else { return .invalid("no basic OCSP response") }
        defer { OCSP_BASICRESP_free(basic) }
        guard let store = X509_STORE_new(), let stack = sk_shim_X509_new_null() else {
            return .invalid("out of memory")
        }
        defer {
            X509_STORE_free(store)
            sk_shim_X509_free(stack)
        }
        X509_STORE_add_cert(store, root.x509)
        if issuer != root { X509_STORE_add_cert(store, issuer.x509) }
        sk_shim_X509_push(stack, issuer.x509)
        X509_VERIFY_PARAM_set_time(X509_STORE_get0_param(store), time_t(now.timeIntervalSince1970))
        guard OCSP_basic_verify(basic, stack, store, 0) == 1 else {
            return .invalid("OCSP response signature: \(drainOpenSSLErrors())")
        }
        guard let id = OCSP_cert_to_id(DigestAlgorithm.sha256.md, certificate.x509, issuer.x509) else {
            return .invalid("OCSP_cert_to_id")
        }
        defer { OCSP_CERTID_free(id) }
        var status: Int32 = -1
        var reason: Int32 = -1
        var revoked: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        guard OCSP_resp_find_status(basic, id, &status, &reason, &revoked, &thisUpdate, &nextUpdate) == 1 else {
            // Responders may answer with a SHA-1 CertID; try that form too.
            guard let sha1ID = OCSP_cert_to_id(DigestAlgorithm.sha1.md, certificate.x509, issuer.x509) else {
                return .invalid("OCSP_cert_to_id")
            }
            defer { OCSP_CERTID_free(sha1ID) }
            guard OCSP_resp_find_status(basic, sha1ID, &status, &reason, &revoked, &thisUpdate, &nextUpdate) == 1 else {
                return .invalid("the OCSP response is not about this certificate")
            }
            return finish(status, thisUpdate, nextUpdate)
        }
        return finish(status, thisUpdate, nextUpdate)
    }

    private static func finish(
        _ status: Int32, _ thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?,
        _ nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
    ) -> Status {
        guard OCSP_check_validity(thisUpdate, nextUpdate, 300, -1) == 1 else {
            return .invalid("the OCSP response is not current: \(drainOpenSSLErrors())")
        }
        switch status {
        case V_OCSP_CERTSTATUS_GOOD: return .good
        case V_OCSP_CERTSTATUS_REVOKED: return .revoked
        default: return .invalid("certificate status unknown to the responder")
        }
    }

    private static func responderURL(_ certificate: Certificate) -> String? {
        guard let list = X509_get1_ocsp(certificate.x509) else { return nil }
        defer { X509_email_free(list) }
        guard OPENSSL_sk_num(list) > 0, let first = OPENSSL_sk_value(list, 0) else { return nil }
        return String(cString: first.assumingMemoryBound(to: CChar.self))
    }
}
