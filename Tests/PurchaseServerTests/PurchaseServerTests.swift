import AppStoreEmulator
import AppStoreSignedData
import Foundation
import PurchaseServer
import StoreModel
import StoreTime
import StorekeeperCrypto
import StorekeeperHTTP
import StorekeeperJSON
import StorekeeperTestSupport
import SubscriptionLifecycle
import Synchronization
import Testing

/// The purchase server against the App Store emulator: the emulator's notifications and the app's posted
/// transactions in; the subscriber view, events and signed webhooks out.
@Suite("Purchase server against the emulator")
struct PurchaseServerTests {
    @Test("A subscription's story: the server's view follows the emulator's truth, with the expected webhooks")
    func subscriptionStory() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (account, device) = try await harness.customer()
        let token = UUID()
        let (id, jws) = try await harness.buy("monthly", device: device, token: token)
        let (status, posted) = try await harness.post(jws, user: "alice")
        #expect(status == 200, "\(posted)")
        #expect(posted["entitlements"]?["plus"]?["active"] == .bool(true))

        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        _ = try await harness.store.subscriptionVerb(.setAutoRenew(false), transactionID: id)
        _ = try await harness.store.configureBilling(account.rawValue, retryOnRenewal: nil, gracePeriod: nil)
        try await harness.settleNotifications()
        let view = try await harness.subscriber("alice") { body in
            body["subscriptions"]?[id]?["autoRenewStatus"] == .bool(false)
        }
        let truth = try #require(try await harness.store.subscriptionState(originalTransactionID: id))
        let server = try #require(view["subscriptions"]?[id])
        #expect(server["status"]?.int64Value == truth.status.rawValue)
        #expect(server["autoRenewStatus"] == .bool(truth.autoRenew))
        #expect(
            server["expiresDate"]?.doubleValue
                == truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) })
        #expect(view["entitlements"]?["plus"]?["willRenew"] == .bool(false))
        // Every date in the answer has its ISO 8601 sibling, the same instant.
        let milliseconds = try #require(server["expiresDate"]?.int64Value)
        let iso = try #require(server["expiresDateISO"]?.stringValue)
        let parsed = try #require(
            try? Date(iso, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: iso.contains("."))))
        #expect(Int64((parsed.timeIntervalSince1970 * 1000).rounded()) == milliseconds)
        #expect(view["entitlements"]?["plus"]?["expiresDateISO"]?.stringValue?.hasSuffix("Z") == true)
        #expect(view["purchases"]?.arrayValue?.first?["purchaseDateISO"]?.stringValue != nil)

        _ = try await harness.store.subscriptionVerb(.expireNow, transactionID: id)
        try await harness.settleNotifications()
        let expired = try await harness.subscriber("alice") { $0["subscriptions"]?[id]?["status"]?.int64Value == 2 }
        #expect(expired["entitlements"]?["plus"]?["active"] == .bool(false))
        let types = try await harness.sink.types { $0.contains("EXPIRATION") }
        // Webhooks due together go out concurrently (receivers order by event_timestamp_ms): the renewal and
        // the cancellation may arrive either way round, between the purchase and the expiry.
        #expect(types.sorted() == ["CANCELLATION", "EXPIRATION", "INITIAL_PURCHASE", "RENEWAL"])
        #expect(types.first == "INITIAL_PURCHASE" && types.last == "EXPIRATION", "\(types)")
        #expect(harness.sink.state.received.withLock { $0.allSatisfy(\.signatureValid) })
        #expect(
            harness.sink.state.received.withLock { $0.allSatisfy { $0.event["app_user_id"]?.stringValue == "alice" } })
    }

    /// Bob buys monthly with billing retry and a grace period on; a month later his renewal fails: the
    /// subscription's id and his view once the server says status 4 (or after about a minute).
    static func intoGracePeriod(_ harness: ServerHarness) async throws -> (id: String, view: JSONValue) {
        let (account, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device, token: UUID())
        _ = try await harness.post(jws, user: "bob")
        _ = try await harness.store.configureBilling(account.rawValue, retryOnRenewal: true, gracePeriod: true)
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        try await harness.settleNotifications()
        return (id, try await harness.subscriber("bob") { $0["subscriptions"]?[id]?["status"]?.int64Value == 4 })
    }

    @Test("Billing trouble: BILLING_ISSUE in the grace period (still entitled), then EXPIRATION when retry ends")
    func billingTrouble() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (id, grace) = try await Self.intoGracePeriod(harness)
        #expect(grace["entitlements"]?["plus"]?["inGracePeriod"] == .bool(true))
        #expect(grace["entitlements"]?["plus"]?["active"] == .bool(true))
        _ = try await harness.store.setClock(advance: StorePeriod(months: 3), rate: nil)
        try await harness.settleNotifications()
        let over = try await harness.subscriber("bob") { $0["subscriptions"]?[id]?["status"]?.int64Value == 2 }
        #expect(over["entitlements"]?["plus"]?["active"] == .bool(false))
        #expect(over["subscriptions"]?[id]?["expirationIntent"]?.int64Value == 2)
        let types = try await harness.sink.types { $0.contains("EXPIRATION") }
        #expect(types.starts(with: ["INITIAL_PURCHASE", "BILLING_ISSUE"]) && types.last == "EXPIRATION", "\(types)")
    }

    @Test(
        "V1 notifications: the grace period from pending_renewal_info (status 4, still entitled); the end of billing retry, which V1 does not tell, from reconciliation"
    )
    func billingTroubleV1() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let url = "\(harness.base)/v1/notifications/apple/\(ServerHarness.bundleID)"
        try await harness.store.setNotifications(
            bundleID: ServerHarness.bundleID,
            AppNotifications(productionURLs: [url], sandboxURLs: [url], version: 1, retrySchedule: [0.1, 0.1, 0.1]))
        // V1 sends no status: the server reads it from pending_renewal_info and the receipt.
        let (id, grace) = try await Self.intoGracePeriod(harness)
        #expect(grace["subscriptions"]?[id]?["status"]?.int64Value == 4, "\(grace)")
        #expect(grace["entitlements"]?["plus"]?["active"] == .bool(true))
        _ = try await harness.store.setClock(advance: StorePeriod(months: 3), rate: nil)
        try await harness.settleNotifications()
        // No V1 notification says the retry ended: the grace period's end makes it due, and the poll says so.
        harness.server.startReconciliation(every: .milliseconds(100))
        let over = try await harness.subscriber("bob") { $0["subscriptions"]?[id]?["status"]?.int64Value == 2 }
        #expect(over["subscriptions"]?[id]?["status"]?.int64Value == 2, "\(over)")
        #expect(over["entitlements"]?["plus"]?["active"] == .bool(false))
    }

    @Test("Consumables credit the ledger; a refund debits it below zero; non-consumables entitle until refunded")
    func ledgerAndRefunds() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let token = UUID()
        var coins: [String] = []
        for _ in 0..<2 {
            let (id, jws) = try await harness.buy("coins", device: device, token: token)
            coins.append(id)
            _ = try await harness.post(jws, user: "carol")
        }
        let (pro, proJWS) = try await harness.buy("pro", device: device, token: token)
        _ = try await harness.post(proJWS, user: "carol")
        var view = try await harness.subscriber("carol")
        #expect(view["balances"]?["com.example.storekeeper.coins"]?.int64Value == 2)
        #expect(view["entitlements"]?["pro"]?["active"] == .bool(true))
        for id in coins + [pro] { _ = try await harness.store.refund(transactionID: id, reason: .other) }
        try await harness.settleNotifications()
        view = try await harness.subscriber("carol") { $0["entitlements"]?["pro"]?["active"] == .bool(false) }
        #expect(view["balances"]?["com.example.storekeeper.coins"]?.int64Value == 0)
        let types = try await harness.sink.types { $0.filter { $0 == "REFUND" }.count == 3 }
        #expect(types.filter { $0 == "REFUND" }.count == 3 && types.filter { $0 == "NON_RENEWING_PURCHASE" }.count == 3)
    }

    @Test("Duplicated and replayed notifications change nothing twice; forged and tampered ones change nothing")
    func duplicatesAndForgeries() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device, token: UUID())
        _ = try await harness.post(jws, user: "dave")
        _ = try await harness.store.subscriptionVerb(.setAutoRenew(false), transactionID: id)
        try await harness.settleNotifications()
        let history = try await harness.store.notificationHistory(
            bundleID: ServerHarness.bundleID, environment: .sandbox, from: .distantPast, to: .distantFuture, after: nil,
            limit: 100)
        let before = try await harness.subscriber("dave") {
            $0["subscriptions"]?[id]?["autoRenewStatus"] == .bool(false)
        }
        let (_, eventsBefore) = try await harness.call("GET", "/v1/subscribers/dave/events")
        let path = "/v1/notifications/apple/\(ServerHarness.bundleID)"
        // Replayed in reverse order, twice.
        for entry in (history + history).reversed() {
            let (status, answer) = try await harness.call(
                "POST", path, try JSONParser.parse(entry.notification.body).objectValue, key: nil)
            #expect(status == 200 && answer["duplicate"] == .bool(true), "\(answer)")
        }
        // Forged: a payload signed by another key; tampered: a payload byte changed.
        let signed = try #require(history.last?.notification.signedPayload)
        var parts = signed.split(separator: ".").map(String.init)
        let decoded = try #require(Data(base64Encoded: Self.padded(parts[1])))
        let payload = try #require(try JSONParser.parse(Array(decoded)).objectValue)
        let forged = try JWSFixtures.sign(payload)
        parts[1] = String(parts[1].dropLast()) + (parts[1].hasSuffix("A") ? "B" : "A")
        for bad in [parts.joined(separator: "."), forged, "not.a.jws"] {
            let (status, answer) = try await harness.call("POST", path, ["signedPayload": .string(bad)], key: nil)
            #expect(status == 422 || status == 400, "\(answer)")
        }
        let after = try await harness.subscriber("dave")
        #expect(after == before)
        let (_, eventsAfter) = try await harness.call("GET", "/v1/subscribers/dave/events")
        #expect(eventsAfter == eventsBefore)
    }

    static func padded(_ base64url: String) -> String {
        var text = base64url.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return text
    }

    @Test(
        "The same purchase posted by another user moves to it (transfer) or stays (keep), and is recorded",
        arguments: [TransferPolicy.transfer, .keep])
    func transfers(policy: TransferPolicy) async throws {
        let harness = try await ServerHarness.make(transferPolicy: policy, withAPI: false)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "erin")
        let (_, second) = try await harness.post(jws, user: "frank")
        let erin = try await harness.subscriber("erin")
        if policy == .transfer {
            #expect(second["subscriptions"]?[id] != nil && erin["subscriptions"]?[id] == nil)
            let types = try await harness.sink.types { $0.contains("TRANSFER") }
            #expect(types.contains("TRANSFER"))
        } else {
            #expect(second["subscriptions"]?[id] == nil && erin["subscriptions"]?[id] != nil)
            #expect(second["flags"]?.arrayValue?.contains(.string("purchase_kept_by_other_user")) == true)
        }
    }

    @Test("A purchase moved to another user by a transfer leaves its former owner's kept answers")
    func transferLeavesFormerOwner() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("pro", device: device)
        _ = try await harness.post(jws, user: "erin")
        // Read, so kept.
        #expect(try await harness.subscriber("erin")["entitlements"]?["pro"]?["active"] == .bool(true))
        // The same purchase under a new transaction id (as StoreKit 1 restores it), posted by another user: the
        // owner is known only from the original's other transactions.
        var payload = try CompactJWS(jws).payload
        payload["transactionId"] = .string(String((Int(id) ?? 0) + 1_000_000))
        let pki = harness.store.pki
        let signer = try JWSChainSigner(
            key: pki.signedData.leafKey, chain: [pki.signedData.leaf, pki.signedData.intermediate, pki.signedData.root])
        let (status, frank) = try await harness.post(try signer.sign(payload), user: "frank")
        #expect(status == 200)
        #expect(frank["entitlements"]?["pro"]?["active"] == .bool(true))
        #expect(try await harness.subscriber("erin")["entitlements"]?["pro"]?["active"] != .bool(true))
    }

    @Test("Receipts are verified (bundle, device) and their purchases applied; V1 notifications need the password")
    func receiptsAndV1() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        _ = try await harness.buy("pro", device: device)
        let receipt = try await harness.store.receipt(deviceID: device, bundleID: ServerHarness.bundleID)
        let body: JSONObject = [
            "bundleId": .string(ServerHarness.bundleID), "appUserId": .string("gina"),
            "receipt": .string(Data(receipt).base64EncodedString()), "deviceId": .string(device),
        ]
        let (status, view) = try await harness.call("POST", "/v1/receipts", body, key: ServerHarness.publicKey)
        #expect(status == 200 && view["entitlements"]?["pro"]?["active"] == .bool(true), "\(view)")
        var wrongDevice = body
        wrongDevice["deviceId"] = .string(UUID().uuidString)
        let (refused, _) = try await harness.call("POST", "/v1/receipts", wrongDevice, key: ServerHarness.publicKey)
        #expect(refused == 422)
        let (unauthorized, _) = try await harness.call("POST", "/v1/receipts", body, key: "pk_wrong_key")
        #expect(unauthorized == 401)
        let v1: JSONObject = [
            "notification_type": .string("DID_RENEW"), "password": .string("wrong"),
            "unified_receipt": .object(["latest_receipt": .string(Data(receipt).base64EncodedString())]),
        ]
        let (badPassword, _) = try await harness.call(
            "POST", "/v1/notifications/apple/\(ServerHarness.bundleID)", v1, key: nil)
        #expect(badPassword == 401)
        // With the shared secret it is taken, and kept without it.
        var good = v1
        good["password"] = .string("s3cret")
        let (taken, answer) = try await harness.call(
            "POST", "/v1/notifications/apple/\(ServerHarness.bundleID)", good, key: nil)
        #expect(taken == 200, "\(answer)")
        let key = "notification-v1:" + Digest.hex(Digest.sha256(JSONWriter.bytes(.object(good))).prefix(16))
        let kept = try #require(try await harness.server.storage.read { try $0.input(key: key) })
        let stored = try JSONParser.parse(kept)
        #expect(stored["password"] == nil && stored["notification_type"] == .string("DID_RENEW"))
        #expect(!String(decoding: kept, as: UTF8.self).contains("s3cret"))
        // A long-standing subscriber's V1 notification (its receipt and latest_receipt_info) is past V2's 64 KiB.
        var long = good
        long["unified_receipt"] = .object([
            "latest_receipt": .string(Data(receipt).base64EncodedString()),
            "latest_receipt_info": .array(
                (0..<150).map {
                    .object(["transaction_id": .string("\($0)"), "note": .string(String(repeating: "x", count: 700))])
                }),
        ])
        #expect(JSONWriter.bytes(.object(long)).count > 100_000)
        let sent = try await HTTPClient().send(
            "POST", harness.base + "/v1/notifications/apple/\(ServerHarness.bundleID)",
            headers: [("Content-Type", "application/json")], body: JSONWriter.bytes(.object(long)))
        #expect(sent.status == 200, "\(String(decoding: sent.body, as: UTF8.self))")
    }

    @Test(
        "A purchase first heard of without an owner gets its waiting webhooks when a notification finds its owner by token"
    )
    func ownerlessEventsClaimedByToken() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let token = UUID()
        // The subscription's SUBSCRIBED arrives before anyone holds its token: its INITIAL_PURCHASE waits.
        let (monthly, _) = try await harness.buy("monthly", device: device, token: token)
        try await harness.settleNotifications()
        // The app posts another purchase carrying the same token: the token is the user's from now on.
        let (_, proJWS) = try await harness.buy("pro", device: device, token: token)
        #expect(try await harness.post(proJWS, user: "uma").0 == 200)
        // The subscription renews: its DID_RENEW finds uma through the token, and the waiting events are hers.
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        try await harness.settleNotifications()
        let received = try await harness.sink.types { $0.contains("RENEWAL") && $0.contains("INITIAL_PURCHASE") }
        #expect(received.contains("INITIAL_PURCHASE") && received.contains("RENEWAL"), "\(received)")
        let initial = harness.sink.state.received.withLock { list in
            list.first { $0.event["type"] == .string("INITIAL_PURCHASE") }?.event
        }
        #expect(initial?["app_user_id"] == .string("uma") && initial?["original_transaction_id"] == .string(monthly))
    }

    @Test("A consumable's refund told by a V1 REFUND (its latest_receipt_info) debits the ledger once")
    func v1ConsumableRefund() async throws {
        let harness = try await ServerHarness.make()
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (coins, jws) = try await harness.buy("coins", device: device)
        #expect(try await harness.post(jws, user: "hal").0 == 200)
        #expect(try await harness.subscriber("hal")["balances"]?["com.example.storekeeper.coins"]?.int64Value == 1)
        let receipt = try await harness.store.receipt(deviceID: device, bundleID: ServerHarness.bundleID)
        let refunded = Int64(Date().timeIntervalSince1970 * 1000)
        let v1: JSONObject = [
            "notification_type": .string("REFUND"), "password": .string("s3cret"),
            "unified_receipt": .object([
                "latest_receipt": .string(Data(receipt).base64EncodedString()),
                "latest_receipt_info": .array([
                    .object([
                        "transaction_id": .string(coins), "product_id": .string("com.example.storekeeper.coins"),
                        "cancellation_date_ms": .string(String(refunded)), "cancellation_reason": .string("0"),
                    ]),
                    // One the server never saw changes nothing.
                    .object(["transaction_id": .string("1999999999999999"), "cancellation_date_ms": .string("1")]),
                ]),
            ]),
        ]
        for _ in 0..<2 {
            let (status, answer) = try await harness.call(
                "POST", "/v1/notifications/apple/\(ServerHarness.bundleID)", v1, key: nil)
            #expect(status == 200, "\(answer)")
        }
        #expect(try await harness.subscriber("hal")["balances"]?["com.example.storekeeper.coins"]?.int64Value == 0)
        #expect(try await harness.server.storage.read { try $0.purchase("1999999999999999") } == nil)
    }

    @Test("A V1 notification from an environment the app does not accept is refused and applies nothing")
    func v1Environment() async throws {
        let harness = try await ServerHarness.make(environments: [.production])
        defer { harness.stop() }
        let (_, device) = try await harness.customer(environment: .sandbox)
        let (id, _) = try await harness.buy("pro", device: device)
        let receipt = try await harness.store.receipt(deviceID: device, bundleID: ServerHarness.bundleID)
        let v1: JSONObject = [
            "notification_type": .string("DID_RENEW"), "password": .string("s3cret"),
            "unified_receipt": .object(["latest_receipt": .string(Data(receipt).base64EncodedString())]),
        ]
        let (status, answer) = try await harness.call(
            "POST", "/v1/notifications/apple/\(ServerHarness.bundleID)", v1, key: nil)
        #expect(status == 400 && answer["error"]?["code"] == .string("invalid_request"), "\(answer)")
        let (stored, inputs) = try await harness.server.storage.read {
            (try $0.purchases(original: TransactionID(id)), try $0.inputCount())
        }
        #expect(stored.isEmpty && inputs == 0, "\(stored), \(inputs) inputs")
    }

    @Test("V1 pending renewal info: ids and intents as strings or numbers, flags as 1/0, true/false or booleans")
    func v1Values() throws {
        let text = #"""
            {"notification_type": "DID_CHANGE_RENEWAL_STATUS", "original_transaction_id": 1000000000000001,
             "auto_renew_status_change_date_ms": "1796400000000",
             "unified_receipt": {"pending_renewal_info": [
                {"original_transaction_id": 1000000000000001, "auto_renew_status": "0", "expiration_intent": 1},
                {"original_transaction_id": "1000000000000002", "auto_renew_status": true, "expiration_intent": "2"},
                {"original_transaction_id": "1000000000000003", "auto_renew_status": "false"}]}}
            """#
        let object = try #require(try JSONParser.parse(Array(text.utf8)).objectValue)
        let notification = try #require(V1Notification(object))
        #expect(
            notification.pendingRenewals.map(\.originalTransactionID) == [
                "1000000000000001", "1000000000000002", "1000000000000003",
            ])
        #expect(notification.pendingRenewals.map(\.autoRenewStatus) == [false, true, false])
        #expect(notification.pendingRenewals.map(\.expirationIntent) == [1, 2, nil])
    }

    @Test("V1 pending renewal info gives Apple's status: active, billing retry, grace period, expired")
    func v1Status() throws {
        let now = Date(timeIntervalSince1970: 1_796_400_000)
        var renewal = V1Notification.PendingRenewal(originalTransactionID: "1")
        #expect(renewal.status(latestExpires: now.addingTimeInterval(60), at: now) == 1)
        #expect(renewal.status(latestExpires: now.addingTimeInterval(-60), at: now) == 2)
        #expect(renewal.status(latestExpires: nil, at: now) == nil, "no period of it in the receipt")
        #expect(renewal.status(latestExpires: now.addingTimeInterval(60), revoked: true, at: now) == 5)
        renewal.isInBillingRetryPeriod = true
        #expect(renewal.status(latestExpires: now.addingTimeInterval(-60), at: now) == 3)
        renewal.gracePeriodExpiresDate = now.addingTimeInterval(3_600)
        #expect(renewal.status(latestExpires: now.addingTimeInterval(-60), at: now) == 4)
        renewal.gracePeriodExpiresDate = now.addingTimeInterval(-1)
        #expect(renewal.status(latestExpires: now.addingTimeInterval(-60), at: now) == 3, "the grace period over")
        // Parsed from the body: the flag and the grace period's milliseconds.
        let text = #"""
            {"notification_type": "DID_FAIL_TO_RENEW", "unified_receipt": {"pending_renewal_info": [
                {"original_transaction_id": "1", "is_in_billing_retry_period": "1",
                 "grace_period_expires_date_ms": "1796403600000"}]}}
            """#
        let object = try #require(try JSONParser.parse(Array(text.utf8)).objectValue)
        let parsed = try #require(V1Notification(object))
        #expect(parsed.pendingRenewals.first?.status(latestExpires: now.addingTimeInterval(-60), at: now) == 4)
    }

    @Test("Grants give an entitlement until they end or are revoked; the routes need the secret key")
    func grantsAndAuth() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let (status, granted) = try await harness.call(
            "POST", "/v1/subscribers/hank/entitlements/plus/grant", ["durationDays": .integer(7)])
        #expect(status == 200 && granted["entitlements"]?["plus"]?["source"] == .string("promotional"))
        #expect(granted["entitlements"]?["plus"]?["active"] == .bool(true))
        let (_, revoked) = try await harness.call("POST", "/v1/subscribers/hank/entitlements/plus/revoke")
        #expect(revoked["entitlements"]?["plus"]?["active"] == .bool(false))
        let (unknown, _) = try await harness.call("POST", "/v1/subscribers/hank/entitlements/gold/grant", [:])
        #expect(unknown == 404)
        let (noKey, _) = try await harness.call("GET", "/v1/subscribers/hank", key: ServerHarness.publicKey)
        #expect(noKey == 401)
        let (missing, _) = try await harness.call("GET", "/v1/subscribers/nobody")
        #expect(missing == 404)
        // Which apps the server serves is not learnt without a key: an unknown bundle id is 401 like a known
        // one without its key; with the secret key it is the 404 it is.
        for bundle in [ServerHarness.bundleID, "com.example.unknown"] {
            let (guessed, _) = try await harness.call("GET", "/v1/entitlements/hank?bundleId=\(bundle)", key: nil)
            #expect(guessed == 401, "\(bundle)")
        }
        let (notServed, _) = try await harness.call("GET", "/v1/entitlements/hank?bundleId=com.example.unknown")
        #expect(notServed == 404)
        let (health, _) = try await harness.call("GET", "/healthz", key: nil)
        #expect(health == 200)
        let metrics = try await HTTPClient().send("GET", harness.base + "/metrics")
        let text = String(decoding: metrics.body, as: UTF8.self)
        #expect(text.contains("storekeeper_webhook_outbox_pending"))
        // The storage's write transactions and the writes they held: the grant and the revocation at least.
        func total(_ name: String) -> Double? {
            text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap {
                Double($0.split(separator: " ")[1])
            }
        }
        #expect(text.contains("# TYPE storekeeper_storage_writes_total counter"))
        let transactions = try #require(total("storekeeper_storage_write_transactions_total"))
        #expect(transactions >= 2)
        #expect(try #require(total("storekeeper_storage_writes_total")) >= transactions)
    }

    @Test("Webhooks refused at first are retried until delivered; their history shows every attempt")
    func webhookRetries() async throws {
        let harness = try await ServerHarness.make(withAPI: false, failFirstWebhooks: [500, 503])
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (_, jws) = try await harness.buy("pro", device: device)
        _ = try await harness.post(jws, user: "ivan")
        let types = try await harness.sink.types { !$0.isEmpty }
        #expect(types == ["NON_RENEWING_PURCHASE"])
        var deliveries: [JSONValue] = []
        for _ in 0..<3_000 {
            let (_, body) = try await harness.call("GET", "/v1/webhooks/deliveries")
            deliveries = body["deliveries"]?.arrayValue ?? []
            if deliveries.allSatisfy({ $0["state"] == .string("delivered") }) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        let attempts = deliveries.first?["attempts"]?.arrayValue?.compactMap { $0["status"]?.int64Value }
        #expect(attempts == [500, 503, 200])
    }

    @Test("An event wakes the webhook sender: with an hour between its own looks, the webhook still comes at once")
    func eventWakesDelivery() async throws {
        let harness = try await ServerHarness.make(withAPI: false, deliveryGranularity: .seconds(3_600))
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (_, jws) = try await harness.buy("pro", device: device)
        // The sender's first look, at its start, found nothing: it sleeps for the hour unless woken.
        _ = try await harness.post(jws, user: "walt")
        #expect(try await harness.sink.types { !$0.isEmpty } == ["NON_RENEWING_PURCHASE"])
    }

    @Test("Any 2xx acknowledges a webhook: a receiver answering 204 is not asked again")
    func webhookNoContent() async throws {
        let harness = try await ServerHarness.make(withAPI: false, failFirstWebhooks: [204])
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (_, jws) = try await harness.buy("pro", device: device)
        _ = try await harness.post(jws, user: "judy")
        var deliveries: [JSONValue] = []
        for _ in 0..<3_000 {
            let (_, body) = try await harness.call("GET", "/v1/webhooks/deliveries")
            deliveries = body["deliveries"]?.arrayValue ?? []
            if !deliveries.isEmpty, deliveries.allSatisfy({ $0["state"] == .string("delivered") }) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(deliveries.count == 1)
        #expect(deliveries.first?["state"] == .string("delivered"))
        #expect(deliveries.first?["attempts"]?.arrayValue?.compactMap { $0["status"]?.int64Value } == [204])
        #expect(deliveries.first?["nextAttempt"] == .null)
    }

    @Test("Apple's TEST notification becomes a TEST webhook; /metrics counts it")
    func testNotification() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let pki = harness.store.pki.signedData
        let signer = try JWSChainSigner(key: pki.leafKey, chain: [pki.leaf, pki.intermediate, pki.root])
        let payload = try signer.sign([
            "notificationType": .string("TEST"), "notificationUUID": .string(UUID().uuidString.lowercased()),
            "data": .object(["bundleId": .string(ServerHarness.bundleID), "environment": .string("Sandbox")]),
            "version": .string("2.0"), "signedDate": .integer(Int64(Date().timeIntervalSince1970 * 1000)),
        ])
        let (status, answer) = try await harness.call(
            "POST", "/v1/notifications/apple/\(ServerHarness.bundleID)", ["signedPayload": .string(payload)], key: nil)
        #expect(status == 200 && answer["events"] == .integer(1), "\(answer)")
        #expect(try await harness.sink.types { $0.contains("TEST") } == ["TEST"])
        let metrics = String(
            decoding: try await HTTPClient().send("GET", harness.base + "/metrics").body, as: UTF8.self)
        #expect(metrics.contains("storekeeper_notifications_total{type=\"TEST\"} 1"), "\(metrics)")
        #expect(metrics.contains("storekeeper_verifications_total{kind=\"notification\",outcome=\"OK\"} 1"))
        #expect(metrics.contains("storekeeper_events_total{type=\"TEST\"} 1"), "\(metrics)")
    }

    @Test("An alias merges an anonymous id's purchases into the user; requests by either id answer for the user")
    func aliases() async throws {
        let harness = try await ServerHarness.make(withAPI: false)
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "anonymous-7f3a")
        let (_, granted) = try await harness.call(
            "POST", "/v1/subscribers/jane/entitlements/pro/grant", ["durationDays": .integer(3)])
        #expect(granted["entitlements"]?["pro"]?["active"] == .bool(true))
        let (status, merged) = try await harness.call(
            "POST", "/v1/subscribers/jane/aliases", ["alias": .string("anonymous-7f3a")])
        #expect(status == 200, "\(merged)")
        #expect(merged["appUserId"] == .string("jane") && merged["aliases"] == .array([.string("anonymous-7f3a")]))
        #expect(merged["subscriptions"]?[id] != nil && merged["entitlements"]?["plus"]?["active"] == .bool(true))
        let byAlias = try await harness.subscriber("anonymous-7f3a")
        #expect(byAlias["appUserId"] == .string("jane") && byAlias["subscriptions"]?[id] != nil)
        // A purchase posted under the alias now goes to the user; the app's answer names the alias, not whose
        // alias it is.
        let (coins, coinsJWS) = try await harness.buy("coins", device: device)
        let (posted, postedAnswer) = try await harness.post(coinsJWS, user: "anonymous-7f3a")
        #expect(posted == 200 && postedAnswer["appUserId"] == .string("anonymous-7f3a"), "\(postedAnswer)")
        #expect(postedAnswer["requestDate"]?.int64Value != nil)
        let after = try await harness.subscriber("jane")
        #expect(
            after["purchases"]?.arrayValue?.contains { $0["transactionId"] == .string(coins) } == true,
            "the alias's new purchase belongs to the user")
        let (taken, _) = try await harness.call(
            "POST", "/v1/subscribers/kim/aliases", ["alias": .string("anonymous-7f3a")])
        #expect(taken == 400, "an alias belongs to one user")
        // The grant revoked once is gone: a second revoke has none in force to end.
        let (revoked, _) = try await harness.call("POST", "/v1/subscribers/jane/entitlements/pro/revoke", [:])
        #expect(revoked == 200)
        let (again, answer) = try await harness.call("POST", "/v1/subscribers/jane/entitlements/pro/revoke", [:])
        #expect(again == 404, "\(answer)")
        // Pages of events: limit and cursor in range, or a 400 (not a page of another size, or the first again).
        let (paged, page) = try await harness.call("GET", "/v1/subscribers/jane/events?limit=1")
        #expect(paged == 200 && page["events"]?.arrayValue?.count == 1, "\(page)")
        for query in ["limit=0", "limit=501", "limit=ten", "cursor=-1", "cursor=abc"] {
            let (status, refused) = try await harness.call("GET", "/v1/subscribers/jane/events?\(query)")
            #expect(status == 400 && refused["error"]?["code"] == .string("invalid_request"), "\(query): \(refused)")
        }
        let (deliveries, _) = try await harness.call("GET", "/v1/webhooks/deliveries?limit=1000")
        #expect(deliveries == 400)
    }

    @Test("Notifications that never arrived are recovered by polling: the history's failures and overdue renewals")
    func reconciliation() async throws {
        // Apple cannot reach the server: the emulator's notifications go to a port nobody listens on.
        let harness = try await ServerHarness.make(notificationsTo: "http://127.0.0.1:9/unreachable")
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        // The app posts its purchase; then the renewal comes, and no notification reaches the server.
        _ = try await harness.post(jws, user: "lena")
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        try await harness.settleNotifications()
        let truth = try #require(try await harness.store.subscriptionState(originalTransactionID: id))
        let stale = try await harness.subscriber("lena")
        #expect(
            stale["subscriptions"]?[id]?["expiresDate"]?.doubleValue
                != truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) })
        let report = await harness.server.reconcile()
        #expect(report.failures.isEmpty, "\(report.failures)")
        #expect(report.notificationsRecovered >= 2, "SUBSCRIBED and DID_RENEW from the history")
        let view = try await harness.subscriber("lena")
        #expect(
            view["subscriptions"]?[id]?["expiresDate"]?.doubleValue
                == truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) })
        #expect(try await harness.sink.types { $0.contains("RENEWAL") }.contains("RENEWAL"))
        // A second pass finds nothing new.
        let again = await harness.server.reconcile()
        #expect(again.notificationsRecovered == 0)
    }

    @Test("A renewal date passed without news: the subscription is asked for (Get All Subscription Statuses)")
    func overdueRefresh() async throws {
        let harness = try await ServerHarness.make(notificationsTo: "http://127.0.0.1:9/unreachable")
        defer { harness.stop() }
        let (_, device) = try await harness.customer()
        let (id, jws) = try await harness.buy("monthly", device: device)
        _ = try await harness.post(jws, user: "mia")
        // Notifications stop being recorded at all (no URL), then a month passes.
        try await harness.store.setNotifications(bundleID: ServerHarness.bundleID, AppNotifications())
        _ = try await harness.store.setClock(advance: StorePeriod(months: 1), rate: nil)
        // Well past the old renewal date (more than the server's one-minute margin of store time).
        _ = try await harness.store.setClock(advance: StorePeriod(days: 10), rate: nil)
        let report = await harness.server.reconcile()
        #expect(report.subscriptionsRefreshed == 1, "\(report)")
        let truth = try #require(try await harness.store.subscriptionState(originalTransactionID: id))
        let view = try await harness.subscriber("mia")
        #expect(
            view["subscriptions"]?[id]?["expiresDate"]?.doubleValue
                == truth.expiresDate.map { ($0.timeIntervalSince1970 * 1000).rounded(.down) })
        #expect(await harness.server.reconcile().subscriptionsRefreshed == 0, "no longer overdue")
    }
}
