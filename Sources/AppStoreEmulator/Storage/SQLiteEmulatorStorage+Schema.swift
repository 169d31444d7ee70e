import Foundation
import StoreModel
import StorekeeperSQL
import StorekeeperSQLite
import Synchronization

/// The emulator's SQLite schema, as the migrations that build it (applied in order, each once).
extension SQLiteEmulatorStorage {
    static let migrations = [
        // 001 kept the whole state as one JSON document; 002 moves it into tables (imported at open).
        Migration("001-state", "CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 1), document BLOB NOT NULL)"),
        Migration(
            "002-tables",
            """
            CREATE TABLE accounts (
                id TEXT PRIMARY KEY, environment TEXT NOT NULL, storefront TEXT NOT NULL,
                ask_to_buy INTEGER NOT NULL DEFAULT 0, purchase_failure TEXT
            );
            CREATE TABLE devices (id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts (id));
            CREATE TABLE installs (
                device_id TEXT NOT NULL REFERENCES devices (id), bundle_id TEXT NOT NULL, version TEXT NOT NULL,
                original_version TEXT NOT NULL, original_purchase_date REAL NOT NULL,
                vpp_assigned INTEGER NOT NULL DEFAULT 0, vpp_revoked_at REAL,
                PRIMARY KEY (device_id, bundle_id)
            );
            CREATE TABLE transactions (
                id TEXT PRIMARY KEY, original_id TEXT NOT NULL, account_id TEXT NOT NULL REFERENCES accounts (id),
                bundle_id TEXT NOT NULL, product_id TEXT NOT NULL, kind TEXT NOT NULL,
                quantity INTEGER NOT NULL CHECK (quantity > 0), purchase_date REAL NOT NULL,
                original_purchase_date REAL NOT NULL, expires_date REAL, web_order_line_item_id INTEGER,
                group_id TEXT, reason TEXT NOT NULL, ownership TEXT NOT NULL, offer_type INTEGER, offer_id TEXT,
                offer_discount TEXT, offer_period TEXT, price INTEGER, currency TEXT, app_account_token TEXT,
                application_username TEXT, revocation_date REAL, revocation_reason INTEGER,
                is_upgraded INTEGER NOT NULL DEFAULT 0, renewal_number INTEGER NOT NULL DEFAULT 0,
                finished INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX transactions_by_owner ON transactions (account_id, bundle_id, purchase_date);
            CREATE INDEX transactions_unfinished ON transactions (account_id, bundle_id) WHERE finished = 0;
            CREATE INDEX transactions_by_original ON transactions (original_id, renewal_number);
            CREATE TABLE subscriptions (
                original_id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts (id),
                bundle_id TEXT NOT NULL, product_id TEXT NOT NULL, auto_renew_product_id TEXT NOT NULL,
                status INTEGER NOT NULL, auto_renew INTEGER NOT NULL, expires_date REAL, expiration_intent INTEGER,
                grace_period_expires_date REAL, billing_retry_ends_date REAL, renewal_count INTEGER NOT NULL,
                latest_transaction_id TEXT NOT NULL
            );
            CREATE INDEX subscriptions_by_owner ON subscriptions (account_id, bundle_id);
            CREATE TABLE pending_payments (
                id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts (id), bundle_id TEXT NOT NULL,
                product_id TEXT NOT NULL, quantity INTEGER NOT NULL, date REAL NOT NULL, state TEXT NOT NULL,
                reason TEXT, finished INTEGER NOT NULL DEFAULT 0, app_account_token TEXT, application_username TEXT,
                resolvable INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX pending_payments_by_account ON pending_payments (account_id, date);
            CREATE TABLE due_events (
                kind TEXT NOT NULL, key TEXT NOT NULL, due REAL NOT NULL, PRIMARY KEY (kind, key)
            );
            CREATE INDEX due_events_by_time ON due_events (due, kind, key);
            CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """),
        Migration(
            "003-lifecycle-and-notifications",
            """
            ALTER TABLE accounts ADD COLUMN billing_retry_on_renewal INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE accounts ADD COLUMN billing_grace_period INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE subscriptions ADD COLUMN price_increase_status INTEGER;
            CREATE TABLE notifications (
                position INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, bundle_id TEXT NOT NULL,
                environment TEXT NOT NULL, version INTEGER NOT NULL, url TEXT NOT NULL, body BLOB NOT NULL,
                signed_payload TEXT, type TEXT NOT NULL, subtype TEXT, v1_type TEXT, original_transaction_id TEXT,
                created REAL NOT NULL, state TEXT NOT NULL, attempts TEXT NOT NULL, retry_delays TEXT NOT NULL,
                retry_client_errors INTEGER NOT NULL, timeout_ms INTEGER NOT NULL
            );
            CREATE INDEX notifications_by_app ON notifications (bundle_id, environment, created, position);
            CREATE INDEX subscriptions_by_renewal_product ON subscriptions (auto_renew_product_id, status);
            """),
        Migration(
            "004-family-sharing-and-offers",
            """
            ALTER TABLE subscriptions ADD COLUMN offer_type INTEGER;
            ALTER TABLE subscriptions ADD COLUMN offer_id TEXT;
            ALTER TABLE subscriptions ADD COLUMN offer_discount TEXT;
            ALTER TABLE subscriptions ADD COLUMN offer_period TEXT;
            ALTER TABLE subscriptions ADD COLUMN offer_periods_left INTEGER NOT NULL DEFAULT 0;
            CREATE TABLE families (id TEXT PRIMARY KEY, organizer TEXT NOT NULL REFERENCES accounts (id));
            CREATE TABLE family_members (
                account_id TEXT PRIMARY KEY REFERENCES accounts (id),
                family_id TEXT NOT NULL REFERENCES families (id), position INTEGER NOT NULL
            );
            CREATE INDEX family_members_by_family ON family_members (family_id, position);
            CREATE TABLE family_shares (
                source_original_id TEXT NOT NULL, member_account_id TEXT NOT NULL REFERENCES accounts (id),
                member_original_id TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (source_original_id, member_account_id)
            );
            """),
        Migration(
            "005-server-api",
            """
            ALTER TABLE transactions ADD COLUMN order_id TEXT;
            ALTER TABLE transactions ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
            UPDATE transactions SET revision = rowid;
            CREATE INDEX transactions_by_revision ON transactions (revision);
            CREATE INDEX transactions_by_owner_revision ON transactions (account_id, bundle_id, revision);
            CREATE INDEX transactions_by_order ON transactions (order_id) WHERE order_id IS NOT NULL;
            """),
        Migration(
            "006-dashboard",
            """
            CREATE INDEX devices_by_account ON devices (account_id);
            CREATE INDEX notifications_by_original ON notifications (original_transaction_id, position);
            CREATE INDEX transactions_by_product_revision ON transactions (product_id, revision);
            """),
        // A notification's signed payload (V2) or body (V1) is written once, beside the row whose state and
        // attempts change: recording an attempt then rewrites a small row, not 14 KB of JWS.
        Migration(
            "007-notification-payloads",
            """
            CREATE TABLE notification_payloads (position INTEGER PRIMARY KEY, payload BLOB NOT NULL);
            INSERT INTO notification_payloads (position, payload)
                SELECT position, CASE WHEN version = 2 AND signed_payload IS NOT NULL
                    THEN CAST(signed_payload AS BLOB) ELSE body END FROM notifications;
            UPDATE notifications SET body = x'', signed_payload = NULL;
            """),
        // Notifications waiting for a delivery slot (the process sends a bounded number at once), in
        // outbox order.
        Migration(
            "008-delivery-queue", "CREATE TABLE notification_queue (position INTEGER PRIMARY KEY)"),
        // One line per receiver: a receiver that does not answer keeps its own notifications waiting, not
        // every other receiver's behind them.
        Migration(
            "009-delivery-queue-by-receiver",
            """
            DELETE FROM notification_queue WHERE position NOT IN (SELECT position FROM notifications);
            ALTER TABLE notification_queue ADD COLUMN url TEXT NOT NULL DEFAULT '';
            UPDATE notification_queue
                SET url = (SELECT n.url FROM notifications n WHERE n.position = notification_queue.position);
            CREATE INDEX notification_queue_by_url ON notification_queue (url, position);
            """),
        // Done notifications by age, for a retention limit: a prune reads the oldest and nothing else.
        Migration(
            "010-notifications-done-by-created",
            "CREATE INDEX notifications_done_by_created ON notifications (created) WHERE state <> 'pending'"),
        // (account, bundle, purchase date) duplicated the prefix of `transactions_by_owner_revision`, which now
        // answers an account's transactions (sorted after; an account has hundreds, not millions): one random
        // B-tree page fewer for every purchase and renewal. `bench lifecycle` 10,000 x 2 wrote 19.5% less.
        Migration("011-drop-transactions-by-owner", "DROP INDEX IF EXISTS transactions_by_owner"),
        // An account's unfinished transactions are read from its entries in the owner index, which now carries
        // `finished` (SQLite tests it in the index and reads only the unfinished rows): the partial index it
        // replaces put every renewal on a page of its own a second time: ~15% of the WAL frames of a
        // `bench lifecycle` run without notifications (frames by B-tree, from the WAL's frame headers).
        Migration(
            "012-unfinished-in-owner-index",
            """
            DROP INDEX IF EXISTS transactions_unfinished;
            DROP INDEX IF EXISTS transactions_by_owner_revision;
            CREATE INDEX transactions_by_owner_revision ON transactions (account_id, bundle_id, revision, finished);
            """),
        // What 001–012 kept as JSON under per-entity keys in `settings` gets tables of its own, and the
        // rows move there (written so that running it again changes nothing).
        Migration(
            "013-records",
            """
            CREATE TABLE IF NOT EXISTS renewal_extensions (
                position INTEGER PRIMARY KEY,
                original_transaction_id TEXT NOT NULL,
                request_identifier TEXT NOT NULL,
                date REAL NOT NULL,
                effective_date REAL NOT NULL,
                web_order_line_item_id TEXT NOT NULL,
                UNIQUE (original_transaction_id, request_identifier)
            );
            INSERT OR IGNORE INTO renewal_extensions
                (original_transaction_id, request_identifier, date, effective_date, web_order_line_item_id)
                SELECT substr(s.key, 12), json_extract(j.value, '$.requestIdentifier'),
                    json_extract(j.value, '$.date') / 1000.0, json_extract(j.value, '$.effectiveDate') / 1000.0,
                    json_extract(j.value, '$.webOrderLineItemId')
                FROM settings s, json_each(s.value) j WHERE s.key LIKE 'extensions.%' AND json_valid(s.value);
            CREATE TABLE IF NOT EXISTS mass_extensions (
                product_id TEXT NOT NULL,
                request_identifier TEXT NOT NULL,
                environment TEXT NOT NULL,
                storefronts TEXT,
                complete INTEGER NOT NULL,
                complete_date REAL,
                succeeded INTEGER NOT NULL,
                failed INTEGER NOT NULL,
                PRIMARY KEY (product_id, request_identifier)
            ) WITHOUT ROWID;
            INSERT OR IGNORE INTO mass_extensions
                SELECT json_extract(s.value, '$.productId'), json_extract(s.value, '$.requestIdentifier'),
                    json_extract(s.value, '$.environment'),
                    (SELECT group_concat(c.value, ',') FROM json_each(s.value, '$.storefrontCountryCodes') c),
                    coalesce(json_extract(s.value, '$.complete'), 0), json_extract(s.value, '$.completeDate') / 1000.0,
                    coalesce(json_extract(s.value, '$.succeededCount'), 0),
                    coalesce(json_extract(s.value, '$.failedCount'), 0)
                FROM settings s WHERE s.key LIKE 'massExtension.%' AND json_valid(s.value);
            CREATE TABLE IF NOT EXISTS consumption (
                transaction_id TEXT PRIMARY KEY,
                version INTEGER NOT NULL,
                body TEXT NOT NULL
            ) WITHOUT ROWID;
            INSERT OR IGNORE INTO consumption
                SELECT substr(key, 13), CASE json_type(value, '$.deliveryStatus') WHEN 'text' THEN 2 ELSE 1 END, value
                FROM settings WHERE key LIKE 'consumption.%';
            CREATE TABLE IF NOT EXISTS refund_requests (
                transaction_id TEXT PRIMARY KEY,
                reason TEXT NOT NULL
            ) WITHOUT ROWID;
            INSERT OR IGNORE INTO refund_requests
                SELECT substr(key, 15), value FROM settings WHERE key LIKE 'refundRequest.%' AND value != '';
            CREATE TABLE IF NOT EXISTS api_keys (
                position INTEGER PRIMARY KEY,
                key_id TEXT NOT NULL UNIQUE,
                issuer_id TEXT NOT NULL,
                bundle_id TEXT NOT NULL,
                public_key TEXT NOT NULL
            );
            INSERT OR IGNORE INTO api_keys (key_id, issuer_id, bundle_id, public_key)
                SELECT json_extract(j.value, '$.keyId'), json_extract(j.value, '$.issuerId'),
                    json_extract(j.value, '$.bundleId'), json_extract(j.value, '$.publicKey')
                FROM settings s, json_each(s.value) j WHERE s.key = 'apiKeys' AND json_valid(s.value);
            CREATE TABLE IF NOT EXISTS offer_nonces (nonce TEXT PRIMARY KEY) WITHOUT ROWID;
            INSERT OR IGNORE INTO offer_nonces SELECT substr(key, 12) FROM settings WHERE key LIKE 'offerNonce.%';
            DELETE FROM settings WHERE key LIKE 'extensions.%' OR key LIKE 'massExtension.%'
                OR key LIKE 'consumption.%' OR key LIKE 'refundRequest.%' OR key = 'apiKeys'
                OR key LIKE 'offerNonce.%';
            """),
        // Each account's download of each app (its id, `appTransactionId`, is `6` and the serial), and the
        // id on the purchases made since.
        Migration(
            "014-app-transactions",
            """
            CREATE TABLE app_transactions (
                serial INTEGER PRIMARY KEY AUTOINCREMENT, account_id TEXT NOT NULL, bundle_id TEXT NOT NULL,
                UNIQUE (account_id, bundle_id)
            );
            ALTER TABLE transactions ADD COLUMN app_transaction_id TEXT;
            """),
        // Retention Messaging: images, messages, default messages, realtime URLs and performance tests per
        // app and environment, and the realtime requests sent.
        Migration(
            "015-retention-messaging",
            """
            CREATE TABLE retention_items (
                kind TEXT NOT NULL, bundle_id TEXT NOT NULL, environment TEXT NOT NULL, id TEXT NOT NULL,
                state TEXT NOT NULL, document TEXT NOT NULL, created REAL NOT NULL,
                PRIMARY KEY (kind, bundle_id, environment, id)
            ) WITHOUT ROWID;
            CREATE TABLE retention_requests (
                position INTEGER PRIMARY KEY, request_identifier TEXT NOT NULL UNIQUE,
                original_transaction_id TEXT NOT NULL, bundle_id TEXT NOT NULL, environment TEXT NOT NULL,
                date REAL NOT NULL, document TEXT NOT NULL
            );
            CREATE INDEX retention_requests_by_original ON retention_requests (original_transaction_id, position);
            """),
        // Billing plans (API 1.21): monthly billing over a 12-month commitment.
        Migration(
            "016-billing-plans",
            """
            ALTER TABLE transactions ADD COLUMN billing_plan TEXT;
            ALTER TABLE transactions ADD COLUMN commitment TEXT;
            ALTER TABLE subscriptions ADD COLUMN billing_plan TEXT;
            ALTER TABLE subscriptions ADD COLUMN commitment TEXT;
            """),
        // A plan chosen for the next renewal (Retention Messaging's switch-plan answer).
        Migration("017-renewal-billing-plan", "ALTER TABLE subscriptions ADD COLUMN renewal_billing_plan TEXT;"),
        // A mass extension goes on after a restart: the request and how far it got.
        Migration(
            "018-mass-extension-resume",
            """
            ALTER TABLE mass_extensions ADD COLUMN bundle_id TEXT;
            ALTER TABLE mass_extensions ADD COLUMN extend_by_days INTEGER;
            ALTER TABLE mass_extensions ADD COLUMN extend_reason_code INTEGER;
            ALTER TABLE mass_extensions ADD COLUMN resume_after TEXT;
            """),
        // When a subscription's current run of periods began, after a lapse of 60 days or more.
        Migration("019-subscription-run-start", "ALTER TABLE subscriptions ADD COLUMN run_start REAL;"),
        // Due events keyed by their primary key alone (no rowid and no second index on (kind, key)): each
        // renewal, lease and attempt scheduled or cancelled changes two B-trees rather than three.
        Migration(
            "020-due-events-without-rowid",
            """
            CREATE TABLE due_events_keyed (
                kind TEXT NOT NULL, key TEXT NOT NULL, due REAL NOT NULL, PRIMARY KEY (kind, key)
            ) WITHOUT ROWID;
            INSERT INTO due_events_keyed (kind, key, due) SELECT kind, key, due FROM due_events;
            DROP TABLE due_events;
            ALTER TABLE due_events_keyed RENAME TO due_events;
            CREATE INDEX due_events_by_time ON due_events (due, kind, key);
            """),
        // An upgraded period's refunded share (`revocationPercentage` with `REFUND_PRORATED`).
        Migration("021-revocation-percentage", "ALTER TABLE transactions ADD COLUMN revocation_percentage INTEGER"),
    ]
}
