#if canImport(StoreKit)
    public import StoreKit

    @available(iOS 15.0, macOS 12.0, tvOS 15.0, watchOS 8.0, visionOS 1.0, *)
    extension StorekeeperClient {
        /// Sends every transaction StoreKit delivers (`Transaction.updates`: renewals, purchases on other devices,
        /// Ask to Buy approvals, refunds) for `appUserID`, and finishes each once the server acknowledged it; one
        /// the server did not take stays unfinished, so StoreKit delivers it again. Keep the task for the app's
        /// lifetime (start it at launch).
        public nonisolated func observeTransactionUpdates(appUserID: String) -> Task<Void, Never> {
            Task.detached { [self] in
                for await update in Transaction.updates {
                    await self.sync(update, appUserID: appUserID)
                }
            }
        }

        /// Sends one purchase's result (from `Product.purchase()` or `Transaction.updates`) and finishes the
        /// transaction after the server acknowledged it. Unverified transactions are not sent.
        @discardableResult
        public func sync(_ result: VerificationResult<Transaction>, appUserID: String) async -> SyncResult? {
            guard case .verified(let transaction) = result else { return nil }
            guard let synced = try? await syncTransaction(result.jwsRepresentation, appUserID: appUserID) else {
                return nil
            }
            await transaction.finish()
            return synced
        }
    }
#endif
