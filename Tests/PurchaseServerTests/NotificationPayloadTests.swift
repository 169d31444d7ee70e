import Foundation
import PurchaseServer
import StoreModel
import StorekeeperCrypto
import StorekeeperJSON
import StorekeeperTestSupport
import Testing

/// What the server reads from Apple's notification payloads: the environment wherever it is said, and the
/// signed fields that change what it records.
@Suite("Purchase server: what Apple's notification payloads say")
struct NotificationPayloadTests {
    @Test("A notification's environment is read from data, summary, appData or the external purchase token's id")
    func environments() async throws {
        let (server, _) = try await FixtureServer.make(environments: [.production])
        func post(_ notification: JSONObject) async -> Int {
            do {
                let body = JSONWriter.bytes(.object(["signedPayload": .string(try JWSFixtures.sign(notification))]))
                _ = try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: body)
                return 200
            } catch let error as PurchaseServerError {
                return error.status
            } catch {
                return 0
            }
        }
        var base = try JWSFixtures.notification(environment: "Production")
        base["data"] = nil
        var consent = base
        consent["notificationType"] = .string("RESCIND_CONSENT")
        consent["notificationUUID"] = .string(UUID().uuidString.lowercased())
        consent["appData"] = .object([
            "appAppleId": .integer(JWSFixtures.appAppleID), "bundleId": .string(JWSFixtures.bundleID),
            "environment": .string("Sandbox"),
        ])
        #expect(await post(consent) == 400, "a sandbox appData for a production-only app")
        var token = base
        token["notificationType"] = .string("EXTERNAL_PURCHASE_TOKEN")
        token["subtype"] = .string("UNREPORTED")
        token["notificationUUID"] = .string(UUID().uuidString.lowercased())
        token["externalPurchaseToken"] = .object([
            "externalPurchaseId": .string("SANDBOX_0123"), "bundleId": .string(JWSFixtures.bundleID),
            "appAppleId": .integer(JWSFixtures.appAppleID), "tokenCreationDate": .integer(1_700_000_000_000),
        ])
        #expect(await post(token) == 400, "a sandbox token id for a production-only app")
        token["externalPurchaseToken"] = .object([
            "externalPurchaseId": .string("0123"), "bundleId": .string(JWSFixtures.bundleID),
            "appAppleId": .integer(JWSFixtures.appAppleID), "tokenCreationDate": .integer(1_700_000_000_000),
        ])
        #expect(await post(token) == 200, "a production token")
    }

    @Test(
        "Fields read from Apple's signed payloads: consumptionRequestReason on the request, revocationType and revocationPercentage on the refund"
    )
    func signedFields() async throws {
        let (server, storage) = try await FixtureServer.make()
        func notification(_ type: String, transaction extra: JSONObject, data more: JSONObject = [:]) throws
            -> [UInt8]
        {
            var notification = try JWSFixtures.notification()
            notification["notificationType"] = .string(type)
            notification["subtype"] = nil
            notification["notificationUUID"] = .string(UUID().uuidString.lowercased())
            var data = notification["data"]?.objectValue ?? [:]
            let consumable: JSONObject = [
                "type": .string("Consumable"), "productId": .string("coins"), "quantity": .integer(3),
                "expiresDate": .null, "webOrderLineItemId": .null, "subscriptionGroupIdentifier": .null,
            ]
            var transaction = JWSFixtures.transaction(extra: consumable)
            for member in extra.members { transaction[member.key] = member.value }
            data["signedTransactionInfo"] = .string(try JWSFixtures.sign(transaction))
            data["signedRenewalInfo"] = nil
            data["status"] = nil
            for member in more.members { data[member.key] = member.value }
            notification["data"] = .object(data)
            return JSONWriter.bytes(.object(["signedPayload": .string(try JWSFixtures.sign(notification))]))
        }
        let request = try await server.ingestNotification(
            bundleID: JWSFixtures.bundleID,
            body: notification(
                "CONSUMPTION_REQUEST", transaction: [:],
                data: ["consumptionRequestReason": .string("UNINTENDED_PURCHASE")]))
        let asked = try #require(request.events.first { $0.type == .refundRequest })
        #expect(asked.details["consumptionRequestReason"] == "UNINTENDED_PURCHASE")
        let refund = try await server.ingestNotification(
            bundleID: JWSFixtures.bundleID,
            body: notification(
                "REFUND",
                transaction: [
                    "revocationDate": .integer(JWSFixtures.signedDateMs), "revocationReason": .integer(0),
                    "revocationType": .string("REFUND_PRORATED"), "revocationPercentage": .integer(33_333),
                    "signedDate": .integer(JWSFixtures.signedDateMs + 1_000),
                ]))
        let refunded = try #require(refund.events.first { $0.type == .refund })
        #expect(refunded.details["revocationType"] == "REFUND_PRORATED")
        #expect(refunded.details["revocationPercentage"] == "33333")
        let stored = try await storage.read { try $0.purchase("2000000335310644") }
        #expect(stored?.revocationType == "REFUND_PRORATED" && stored?.revokedUnits == 1)
    }

    @Test("A notification whose nested transaction does not verify is refused (422), not taken without it")
    func nestedFailureRefused() async throws {
        let (server, storage) = try await FixtureServer.make()
        var notification = try JWSFixtures.notification()
        var data = notification["data"]?.objectValue ?? [:]
        let stranger = try TestPKI(keyKind: .p256).chain
        data["signedTransactionInfo"] = .string(try JWSFixtures.sign(JWSFixtures.transaction(), chain: stranger))
        notification["data"] = .object(data)
        let body = JSONWriter.bytes(.object(["signedPayload": .string(try JWSFixtures.sign(notification))]))
        do {
            _ = try await server.ingestNotification(bundleID: JWSFixtures.bundleID, body: body)
            Issue.record("a notification with a forged transaction was taken")
        } catch let error as PurchaseServerError {
            #expect(error.status == 422 && error.message.contains("signedTransactionInfo"), "\(error)")
        }
        #expect(try await storage.read { try $0.purchase("2000000335310644") } == nil)
    }

    @Test("An app user id with a slash is refused (400): it could be stored but never read at /v1/subscribers/{id}")
    func slashInUserID() async throws {
        let (server, storage) = try await FixtureServer.make()
        let token = try JWSFixtures.sign(JWSFixtures.transaction())
        do {
            _ = try await server.ingestTransaction(
                bundleID: JWSFixtures.bundleID, appUserID: "team/42", signedTransaction: token)
            Issue.record("a user id with a slash was taken")
        } catch let error as PurchaseServerError {
            #expect(error.status == 400 && error.message.contains("'/'"), "\(error)")
        }
        #expect(try await storage.read { try $0.purchase("2000000335310644") } == nil)
        _ = try await server.ingestTransaction(
            bundleID: JWSFixtures.bundleID, appUserID: "team-42", signedTransaction: token)
    }
}
