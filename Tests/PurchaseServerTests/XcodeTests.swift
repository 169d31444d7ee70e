import Foundation
import PurchaseServer
import StoreModel
import StorekeeperTestSupport
import Testing

/// Xcode's StoreKit Testing: its receipts and signed transactions, real ones from shared/vectors, accepted
/// only when the app names the certificates Xcode signs with, and kept in the environment `Xcode`.
@Suite(
    "Purchase server: receipts and transactions from Xcode's StoreKit Testing",
    .enabled(if: Vectors.isAvailable, Comment(rawValue: Vectors.missingMessage)))
struct XcodeTests {
    static let bundleID = "com.example.naturelab.backyardbirds.example"

    /// A server for Apple's Backyard Birds sample, trusting Xcode's certificates when `xcode` says so.
    static func server(xcode: Bool) throws -> PurchaseServer {
        let directory = try ExternalTool.temporaryDirectory()
        let certificates = try #require(Vectors.directory).appendingPathComponent("certs/xcode")
        let xcodeMember =
            xcode
            ? #", "xcode": {"certificates": ["\#(certificates.path)/storekit-test-certificate_2020-04-01_2040-03-27.cer", "\#(certificates.path)/storekit-testing-in-xcode_2023-10-19_2024-10-18.cer"]}"#
            : ""
        let file = directory.appendingPathComponent("server.json")
        try Data(
            """
            {"secretKey": "sk_0123456789abcdef", "apps": [{"bundleId": "\(bundleID)", "publicKey": "pk_12345678",
              "entitlements": {"premium": ["pass.premium"]}\(xcodeMember)}]}
            """.utf8
        ).write(to: file)
        let configuration = try ServerConfiguration.load(path: file.path, variables: [:])
        return try PurchaseServer(configuration: configuration, storage: InMemoryServerStorage())
    }

    static func jws(_ name: String) throws -> String {
        String(decoding: try Vectors.bytes("jws/app-store-server-library-swift/\(name).jws"), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("Refused by default: Apple's roots do not sign them")
    func refusedByDefault() async throws {
        let server = try Self.server(xcode: false)
        let error = await #expect(throws: PurchaseServerError.self) {
            _ = try await server.ingestTransaction(
                bundleID: Self.bundleID, appUserID: "dev", signedTransaction: try Self.jws("xcode-signed-transaction"))
        }
        #expect(error?.message.contains(#""xcode": {"certificates""#) == true, "says what to configure")
        await #expect(throws: PurchaseServerError.self) {
            _ = try await server.ingestReceipt(
                bundleID: Self.bundleID, appUserID: "dev",
                receipt: try Vectors.bytes(
                    "receipts/app-store-server-library-swift/xcode-app-receipt-with-transaction.der"),
                deviceID: nil)
        }
    }

    @Test("With Xcode's certificates: Xcode's transaction and receipt are recorded in the environment Xcode")
    func accepted() async throws {
        let server = try Self.server(xcode: true)
        let view = try await server.ingestTransaction(
            bundleID: Self.bundleID, appUserID: "dev", signedTransaction: try Self.jws("xcode-signed-transaction"))
        let purchase = try #require(view.purchases.first)
        #expect(purchase.environment == .xcode)
        #expect(purchase.transactionID == "0" && purchase.productID == "pass.premium")
        #expect(view.subscriptions.first?.environment == .xcode)
        #expect(view.entitlements["premium"] != nil)

        let receiptView = try await server.ingestReceipt(
            bundleID: Self.bundleID, appUserID: "receipt-dev",
            receipt: try Vectors.bytes(
                "receipts/app-store-server-library-swift/xcode-app-receipt-with-transaction.der"),
            deviceID: nil)
        #expect(receiptView.purchases.map(\.environment) == [.xcode])
        #expect(receiptView.purchases.first?.productID == "pass.premium")
    }

    @Test(
        "All five real Xcode receipts (2020–2023, four developers' Xcodes) verify for their apps, in Xcode",
        arguments: [
            ("tpinappreceipt/receipt-xcode.der", "net.zachariadis.cyclemaps", 1),
            ("kvitto/storeKitTestReceipt.der", "com.rd.eehelper", 1),
            ("tpinappreceipt/receipt-no-orig-purchase-date.der", "com.nutcall.alert", 1),
            ("app-store-server-library-swift/xcode-app-receipt-empty.der", bundleID, 0),
            ("app-store-server-library-swift/xcode-app-receipt-with-transaction.der", bundleID, 1),
        ])
    func everyXcodeReceipt(path: String, bundle: String, purchases: Int) async throws {
        let directory = try ExternalTool.temporaryDirectory()
        let certificate = try #require(Vectors.directory).appendingPathComponent(
            "certs/xcode/storekit-test-certificate_2020-04-01_2040-03-27.cer")
        let file = directory.appendingPathComponent("server.json")
        try Data(
            """
            {"secretKey": "sk_0123456789abcdef", "apps": [{"bundleId": "\(bundle)", "publicKey": "pk_12345678",
              "xcode": {"certificates": ["\(certificate.path)"]}}]}
            """.utf8
        ).write(to: file)
        let server = try PurchaseServer(
            configuration: try ServerConfiguration.load(path: file.path, variables: [:]),
            storage: InMemoryServerStorage())
        let view = try await server.ingestReceipt(
            bundleID: bundle, appUserID: "dev", receipt: try Vectors.bytes("receipts/" + path), deviceID: nil)
        #expect(view.purchases.count == purchases)
        #expect(view.purchases.allSatisfy { $0.environment == .xcode })
    }

    @Test("Xcode's certificates vouch for nothing else: another app's Xcode receipt, and a notification")
    func onlyXcode() async throws {
        let server = try Self.server(xcode: true)
        // Signed by the same StoreKit certificate, for another bundle.
        await #expect(throws: PurchaseServerError.self) {
            _ = try await server.ingestReceipt(
                bundleID: Self.bundleID, appUserID: "dev",
                receipt: try Vectors.bytes("receipts/kvitto/storeKitTestReceipt.der"), deviceID: nil)
        }
        // Xcode sends no server notifications: one signed like an Xcode item is not verified.
        let body = Array(#"{"signedPayload": "\#(try Self.jws("xcode-signed-transaction"))"}"#.utf8)
        await #expect(throws: PurchaseServerError.self) {
            _ = try await server.ingestNotification(bundleID: Self.bundleID, body: body)
        }
    }
}
