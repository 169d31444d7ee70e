#if canImport(StoreKit)
    public import StoreKit

    @available(iOS 15.0, macOS 12.0, tvOS 15.0, watchOS 8.0, visionOS 1.0, *)
    extension StorekeeperClient {
        /// Sends every transaction StoreKit delivers (`Transaction.updates`: renewals, purchases on other devices,
        /// Ask to Buy approvals, refunds) for `appUserID`, and finishes each once the server acknowledged it. One
        /// the server did not take stays unfinished, so StoreKit delivers it again; `failed` hears why. Keep the
        /// task for the app's lifetime (start it at launch).
        public nonisolated func observeTransactionUpdates(
            appUserID: String, failed: (@Sendable (StorekeeperClientError) -> Void)? = nil
        ) -> Task<Void, Never> {
            Task.detached { [self] in
                for await update in Transaction.updates {
                    do throws(StorekeeperClientError) {
                        try await self.sync(update, appUserID: appUserID)
                    } catch {
                        failed?(error)
                    }
                }
            }
        }

        /// Sends one purchase's result (from `Product.purchase()` or `Transaction.updates`) and finishes the
        /// transaction after the server acknowledged it; nil for an unverified transaction, which is not sent.
        /// A failure is thrown and the transaction stays unfinished: retry later when `isRetryable`; otherwise
        /// the server refused it for good (`code`), and the app decides whether to finish it.
        @discardableResult
        public func sync(_ result: VerificationResult<Transaction>, appUserID: String)
            async throws(StorekeeperClientError) -> SyncResult?
        {
            guard case .verified(let transaction) = result else { return nil }
            let synced = try await syncTransaction(result.jwsRepresentation, appUserID: appUserID)
            await transaction.finish()
            return synced
        }
    }
#endif
