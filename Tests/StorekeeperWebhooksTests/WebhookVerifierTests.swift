import Foundation
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperWebhooks
import Testing

@Suite("StorekeeperWebhooks: verifying and decoding a webhook")
struct WebhookVerifierTests {
    static let secret = "whsec_0123456789abcdef"
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let body = Array(
        #"{"api_version":"1.0","event":{"id":"RENEWAL:2000","type":"RENEWAL","app_id":"com.example","event_timestamp_ms":1799999999500,"app_user_id":"alice","environment":"SANDBOX","product_id":"monthly","entitlement_ids":["plus"],"transaction_id":"2000","original_transaction_id":"1000","expiration_at_ms":1802592000000,"period_type":"NORMAL","apple_notification_type":"DID_RENEW","source":"notification","future_field":1}}"#
            .utf8)

    /// As the purchase server signs (`PurchaseServer.signature`): HMAC-SHA256 of "<t>.<body>", hex.
    static func signature(_ body: [UInt8], at seconds: Int64 = 1_800_000_000, secret: String = secret) -> String {
        let stamp = String(seconds)
        return "t=\(stamp),v1="
            + Digest.hex(HMAC.sha256(key: Array(secret.utf8), message: Array(stamp.utf8) + [0x2E] + body))
    }

    let verifier = WebhookVerifier(secret: WebhookVerifierTests.secret, now: { WebhookVerifierTests.now })

    static func code(_ body: () throws -> WebhookEvent) -> WebhookVerificationError.Code? {
        do {
            _ = try body()
            return nil
        } catch let error as WebhookVerificationError {
            return error.code
        } catch {
            return WebhookVerificationError.Code(rawValue: "unexpected")
        }
    }

    @Test("A signed event decodes into typed values; unknown members stay in json")
    func decodes() throws {
        let event = try verifier.verify(body: Self.body, signature: Self.signature(Self.body), eventID: "RENEWAL:2000")
        #expect(event.id == "RENEWAL:2000" && event.type == "RENEWAL" && event.apiVersion == "1.0")
        #expect(event.appID == "com.example" && event.appUserID == "alice" && event.environment == "SANDBOX")
        #expect(event.productID == "monthly" && event.entitlementIDs == ["plus"])
        #expect(event.transactionID == "2000" && event.originalTransactionID == "1000")
        #expect(event.eventDate == Date(timeIntervalSince1970: 1_799_999_999.5))
        #expect(event.expirationDate == Date(timeIntervalSince1970: 1_802_592_000))
        #expect(event.periodType == "NORMAL" && event.appleNotificationType == "DID_RENEW")
        #expect(event.source == "notification" && event.json["future_field"] == .integer(1))
        // A rotated secret: several v1, one of them right.
        let rotated =
            "t=1800000000,v1=" + String(repeating: "0", count: 64) + ","
            + Self.signature(Self.body).split(separator: ",")[1]
        #expect(try verifier.verify(body: Self.body, signature: rotated).id == "RENEWAL:2000")
    }

    @Test("Missing, malformed, stale, forged or tampered: refused with the reason, never the secret")
    func refusals() {
        let body = Self.body
        #expect(Self.code { try verifier.verify(body: body, signature: nil) } == .missingSignature)
        #expect(Self.code { try verifier.verify(body: body, signature: "v1=abc") } == .malformedSignature)
        #expect(
            Self.code { try verifier.verify(body: body, signature: "t=x,v1=" + String(repeating: "a", count: 64)) }
                == .malformedSignature)
        #expect(
            Self.code { try verifier.verify(body: body, signature: String(repeating: "t", count: 2000)) }
                == .malformedSignature)
        #expect(
            Self.code { try verifier.verify(body: body, signature: Self.signature(body, at: 1_800_000_000 - 301)) }
                == .staleTimestamp)
        #expect(
            Self.code { try verifier.verify(body: body, signature: Self.signature(body, at: 1_800_000_000 + 301)) }
                == .staleTimestamp)
        #expect(
            Self.code { try verifier.verify(body: body, signature: Self.signature(body, at: 1_800_000_000 - 299)) }
                == nil)
        #expect(
            Self.code { try verifier.verify(body: body, signature: Self.signature(body, secret: "whsec_wrong_secret")) }
                == .badSignature)
        var tampered = body
        tampered[tampered.count - 3] = UInt8(ascii: "2")
        #expect(Self.code { try verifier.verify(body: tampered, signature: Self.signature(body)) } == .badSignature)
        let notJSON = Array("hello".utf8)
        #expect(Self.code { try verifier.verify(body: notJSON, signature: Self.signature(notJSON)) } == .invalidBody)
        #expect(
            Self.code { try verifier.verify(body: body, signature: Self.signature(body), eventID: "OTHER") }
                == .invalidBody)
        do {
            _ = try verifier.verify(body: body, signature: Self.signature(body, secret: "whsec_wrong_secret"))
        } catch { #expect(!error.description.contains(Self.secret) && !error.description.contains("alice")) }
    }
}
