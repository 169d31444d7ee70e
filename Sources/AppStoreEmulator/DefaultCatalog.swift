/// The catalogue `storekeeper appstore serve` uses when given no `.storekit` file: one product of each kind
/// for `com.example.storekeeper`, in Xcode's format 2.0, written for Storekeeper.
public enum DefaultCatalog {
    public static let bundleID = "com.example.storekeeper"

    public static let storekit = """
        {
          "identifier" : "5A7C0E1D",
          "version" : { "major" : 2, "minor" : 0 },
          "settings" : { "_timeRate" : 13, "_storefront" : "USA", "_locale" : "en_US" },
          "products" : [
            { "productID" : "com.example.storekeeper.coins", "type" : "Consumable", "displayPrice" : "0.99",
              "familyShareable" : false, "internalID" : "10000001", "referenceName" : "100 Coins",
              "localizations" : [ { "locale" : "en_US", "displayName" : "100 Coins", "description" : "A pile of coins" } ] },
            { "productID" : "com.example.storekeeper.pro", "type" : "NonConsumable", "displayPrice" : "9.99",
              "familyShareable" : true, "internalID" : "10000002", "referenceName" : "Pro",
              "localizations" : [ { "locale" : "en_US", "displayName" : "Pro", "description" : "Every feature, for good" } ] }
          ],
          "nonRenewingSubscriptions" : [
            { "productID" : "com.example.storekeeper.season", "type" : "NonRenewingSubscription", "displayPrice" : "4.99",
              "familyShareable" : false, "internalID" : "10000003", "referenceName" : "Season Pass",
              "localizations" : [ { "locale" : "en_US", "displayName" : "Season Pass", "description" : "Three months of extras" } ] }
          ],
          "subscriptionGroups" : [
            { "id" : "20000001", "name" : "Storekeeper Plus", "localizations" : [ ],
              "subscriptions" : [
                { "productID" : "com.example.storekeeper.monthly", "type" : "RecurringSubscription", "displayPrice" : "2.99",
                  "familyShareable" : true, "internalID" : "10000004", "referenceName" : "Plus Monthly",
                  "subscriptionGroupID" : "20000001", "groupNumber" : 2, "recurringSubscriptionPeriod" : "P1M",
                  "introductoryOffer" : null,
                  "adHocOffers" : [ { "offerID" : "com.example.storekeeper.comeback", "referenceName" : "Come back",
                    "internalID" : "30000002", "paymentMode" : "payUpFront", "subscriptionPeriod" : "P3M",
                    "displayPrice" : "4.99" } ],
                  "codeOffers" : [ { "internalID" : "30000003", "referenceName" : "WELCOME", "paymentMode" : "free",
                    "subscriptionPeriod" : "P1W", "numberOfPeriods" : 1, "eligibility" : [ "new", "expired" ],
                    "isStackable" : false } ],
                  "winbackOffers" : [ { "offerID" : "com.example.storekeeper.missyou", "referenceName" : "Miss you",
                    "internalID" : "30000004", "paymentMode" : "payAsYouGo", "subscriptionPeriod" : "P1M",
                    "numberOfPeriods" : 2, "displayPrice" : "0.99" } ],
                  "localizations" : [ { "locale" : "en_US", "displayName" : "Plus Monthly", "description" : "Plus, billed monthly" } ] },
                { "productID" : "com.example.storekeeper.yearly", "type" : "RecurringSubscription", "displayPrice" : "24.99",
                  "familyShareable" : false, "internalID" : "10000005", "referenceName" : "Plus Yearly",
                  "subscriptionGroupID" : "20000001", "groupNumber" : 1, "recurringSubscriptionPeriod" : "P1Y",
                  "introductoryOffer" : { "internalID" : "30000001", "paymentMode" : "free", "subscriptionPeriod" : "P1W", "numberOfPeriods" : 1 },
                  "adHocOffers" : [ ], "codeOffers" : [ ],
                  "billingPlans" : [ { "billingPlanType" : "BILLED_UPFRONT", "displayPrice" : "24.99",
                      "commitmentDisplayPrice" : "24.99", "internalID" : "40000001", "isEnabled" : true },
                    { "billingPlanType" : "MONTHLY", "displayPrice" : "2.49", "commitmentDisplayPrice" : "29.88",
                      "internalID" : "40000002", "isEnabled" : true } ],
                  "localizations" : [ { "locale" : "en_US", "displayName" : "Plus Yearly", "description" : "Plus, billed yearly" } ] }
              ] }
          ]
        }
        """
}
