/// An App Store storefront: an ISO 3166-1 alpha-3 country code and Apple's numeric storefront id (a string
/// in JWS `storefrontId`). The table holds the storefront ids published for the App Store's regions
/// (USA 143441 is confirmed by Apple's own fixtures; shared/spec/test-environment.md §6).
public struct Storefront: Sendable, Hashable {
    /// ISO 3166-1 alpha-3, upper case, e.g. "USA".
    public let countryCode: String
    /// Apple's storefront id, e.g. "143441".
    public let id: String

    /// The storefront of a country code (any case); nil when the App Store has no such storefront.
    public init?(countryCode: String) {
        let code = countryCode.uppercased()
        guard let id = Self.ids[code] else { return nil }
        self.countryCode = code
        self.id = id
    }

    public static let unitedStates = Storefront(countryCode: "USA")!

    /// The currency a purchase is charged in on this storefront (ISO 4217): the table of
    /// shared/spec/storefront-currencies.md, US dollars where it names none.
    public var currency: String { Self.currencies[countryCode] ?? "USD" }

    /// Every known country code, sorted.
    public static var countryCodes: [String] { ids.keys.sorted() }

    static let ids: [String: String] = [
        "USA": "143441", "FRA": "143442", "DEU": "143443", "GBR": "143444", "AUT": "143445", "BEL": "143446",
        "FIN": "143447", "GRC": "143448", "IRL": "143449", "ITA": "143450", "LUX": "143451", "NLD": "143452",
        "PRT": "143453", "ESP": "143454", "CAN": "143455", "SWE": "143456", "NOR": "143457", "DNK": "143458",
        "CHE": "143459", "AUS": "143460", "NZL": "143461", "JPN": "143462", "HKG": "143463", "SGP": "143464",
        "CHN": "143465", "KOR": "143466", "IND": "143467", "MEX": "143468", "RUS": "143469", "TWN": "143470",
        "VNM": "143471", "ZAF": "143472", "MYS": "143473", "PHL": "143474", "THA": "143475", "IDN": "143476",
        "PAK": "143477", "POL": "143478", "SAU": "143479", "TUR": "143480", "ARE": "143481", "HUN": "143482",
        "CHL": "143483", "NPL": "143484", "PAN": "143485", "LKA": "143486", "ROU": "143487", "CZE": "143489",
        "ISR": "143491", "UKR": "143492", "KWT": "143493", "HRV": "143494", "CRI": "143495", "SVK": "143496",
        "LBN": "143497", "QAT": "143498", "SVN": "143499", "COL": "143501", "VEN": "143502", "BRA": "143503",
        "GTM": "143504", "ARG": "143505", "SLV": "143506", "PER": "143507", "DOM": "143508", "ECU": "143509",
        "HND": "143510", "JAM": "143511", "NIC": "143512", "PRY": "143513", "URY": "143514", "MAC": "143515",
        "EGY": "143516", "KAZ": "143517", "EST": "143518", "LVA": "143519", "LTU": "143520", "MLT": "143521",
        "MDA": "143523", "ARM": "143524", "BWA": "143525", "BGR": "143526", "JOR": "143528", "KEN": "143529",
        "MKD": "143530", "MDG": "143531", "MLI": "143532", "MUS": "143533", "NER": "143534", "SEN": "143535",
        "TUN": "143536", "UGA": "143537", "AIA": "143538", "BHS": "143539", "ATG": "143540", "BRB": "143541",
        "BMU": "143542", "VGB": "143543", "CYM": "143544", "DMA": "143545", "GRD": "143546", "MSR": "143547",
        "KNA": "143548", "LCA": "143549", "VCT": "143550", "TTO": "143551", "TCA": "143552", "GUY": "143553",
        "SUR": "143554", "BLZ": "143555", "BOL": "143556", "CYP": "143557", "ISL": "143558", "BHR": "143559",
        "BRN": "143560", "NGA": "143561", "OMN": "143562", "DZA": "143563", "AGO": "143564", "BLR": "143565",
        "UZB": "143566", "AZE": "143568", "YEM": "143571", "TZA": "143572", "GHA": "143573", "ALB": "143575",
        "BEN": "143576", "BTN": "143577", "BFA": "143578", "KHM": "143579", "CPV": "143580", "TCD": "143581",
        "COG": "143582", "FJI": "143583", "GMB": "143584", "GNB": "143585", "KGZ": "143586", "LAO": "143587",
        "LBR": "143588", "MWI": "143589", "MRT": "143590", "FSM": "143591", "MNG": "143592", "MOZ": "143593",
        "NAM": "143594", "PLW": "143595", "PNG": "143597", "STP": "143598", "SYC": "143599", "SLE": "143600",
        "SLB": "143601", "SWZ": "143602", "TJK": "143603", "TKM": "143604", "ZWE": "143605",
    ]

    /// Storefronts that do not charge in US dollars.
    static let currencies: [String: String] = [
        "ARE": "AED", "AUS": "AUD", "AUT": "EUR", "BEL": "EUR", "BGR": "BGN", "BRA": "BRL", "CAN": "CAD",
        "CHE": "CHF", "CHL": "CLP", "CHN": "CNY", "COL": "COP", "CYP": "EUR", "CZE": "CZK", "DEU": "EUR",
        "DNK": "DKK", "EGY": "EGP", "ESP": "EUR", "EST": "EUR", "FIN": "EUR", "FRA": "EUR", "GBR": "GBP",
        "GRC": "EUR", "HKG": "HKD", "HRV": "EUR", "HUN": "HUF", "IDN": "IDR", "IND": "INR", "IRL": "EUR",
        "ISR": "ILS", "ITA": "EUR", "JPN": "JPY", "KAZ": "KZT", "KOR": "KRW", "LTU": "EUR", "LUX": "EUR",
        "LVA": "EUR", "MEX": "MXN", "MLT": "EUR", "MYS": "MYR", "NGA": "NGN", "NLD": "EUR", "NOR": "NOK",
        "NZL": "NZD", "PAK": "PKR", "PER": "PEN", "PHL": "PHP", "POL": "PLN", "PRT": "EUR", "QAT": "QAR",
        "ROU": "RON", "RUS": "RUB", "SAU": "SAR", "SGP": "SGD", "SVK": "EUR", "SVN": "EUR", "SWE": "SEK",
        "THA": "THB", "TUR": "TRY", "TWN": "TWD", "TZA": "TZS", "VNM": "VND", "ZAF": "ZAR",
    ]
}
