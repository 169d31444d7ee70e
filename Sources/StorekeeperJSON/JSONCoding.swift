/// `Codable` values to and from ``JSONValue``, so that stored records are written by ``JSONWriter`` and read
/// by ``JSONParser`` like every other JSON here. Keys are the property names; a nil optional is left out;
/// integers stay integers. Types the caller renders itself (dates, say) go through `special`.
public struct JSONValueEncoder: Sendable {
    /// A value's JSON when the caller renders its type itself (a `Date` as milliseconds, say); nil for
    /// every other value, which is encoded member by member.
    public var special: @Sendable (any Encodable) -> JSONValue?

    public init(special: @escaping @Sendable (any Encodable) -> JSONValue? = { _ in nil }) {
        self.special = special
    }

    public func encode(_ value: some Encodable) throws -> JSONValue {
        if let rendered = special(value) { return rendered }
        let encoder = ValueEncoder(special: special)
        try value.encode(to: encoder)
        return encoder.node.value
    }
}

/// The decoding side of ``JSONValueEncoder``.
public struct JSONValueDecoder: Sendable {
    /// The value of `type` that `json` stands for, when the caller reads that type itself (nil: it does not;
    /// throw for a JSON that is not one).
    public var special: @Sendable (any Decodable.Type, JSONValue) throws -> (any Decodable)?

    public init(
        special: @escaping @Sendable (any Decodable.Type, JSONValue) throws -> (any Decodable)? = { _, _ in nil }
    ) {
        self.special = special
    }

    public func decode<T: Decodable>(_ type: T.Type, from json: JSONValue) throws -> T {
        try ValueDecoder(value: json, codingPath: [], special: special).decode(type)
    }
}

// MARK: - Encoding

/// What an encoder builds: a tree of references, so nested containers can fill their part later.
private final class Node {
    enum Content {
        case value(JSONValue)
        case object([(String, Node)])
        case array([Node])
    }
    var content: Content = .value(.null)

    var value: JSONValue {
        switch content {
        case .value(let value): return value
        case .array(let items): return .array(items.map(\.value))
        case .object(let members):
            var object = JSONObject()
            for (key, node) in members { object[key] = node.value }
            return .object(object)
        }
    }

    func member(_ key: String) -> Node {
        let node = Node()
        if case .object(var members) = content {
            content = .value(.null)
            members.append((key, node))
            content = .object(members)
        } else {
            content = .object([(key, node)])
        }
        return node
    }

    func element() -> Node {
        let node = Node()
        if case .array(var items) = content {
            content = .value(.null)
            items.append(node)
            content = .array(items)
        } else {
            content = .array([node])
        }
        return node
    }
}

private struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) {
        self.stringValue = String(intValue)
        self.intValue = intValue
    }
}

private final class ValueEncoder: Encoder {
    let node: Node
    let special: @Sendable (any Encodable) -> JSONValue?
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(node: Node = Node(), special: @escaping @Sendable (any Encodable) -> JSONValue?) {
        self.node = node
        self.special = special
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.content {} else { node.content = .object([]) }
        return KeyedEncodingContainer(KeyedEncoder<Key>(node: node, special: special))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return UnkeyedEncoder(node: node, special: special)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleEncoder(node: node, special: special) }

    /// Encodes `value` into `node`: a primitive, a special value, or member by member.
    static func encode(
        _ value: some Encodable, into node: Node, special: @escaping @Sendable (any Encodable) -> JSONValue?
    )
        throws
    {
        if let primitive = primitive(value) {
            node.content = .value(primitive)
        } else if let rendered = special(value) {
            node.content = .value(rendered)
        } else {
            try value.encode(to: ValueEncoder(node: node, special: special))
        }
    }

    static func primitive(_ value: some Encodable) -> JSONValue? {
        switch value {
        case let text as String: .string(text)
        case let flag as Bool: .bool(flag)
        case let number as Int: .integer(Int64(number))
        case let number as Int64: .integer(number)
        case let number as Int32: .integer(Int64(number))
        case let number as Double: .double(number)
        default: nil
        }
    }
}

private struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let special: @Sendable (any Encodable) -> JSONValue?
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { node.member(key.stringValue).content = .value(.null) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try ValueEncoder.encode(value, into: node.member(key.stringValue), special: special)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        let child = node.member(key.stringValue)
        child.content = .object([])
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, special: special))
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = node.member(key.stringValue)
        child.content = .array([])
        return UnkeyedEncoder(node: child, special: special)
    }
    mutating func superEncoder() -> any Encoder { ValueEncoder(node: node.member("super"), special: special) }
    mutating func superEncoder(forKey key: Key) -> any Encoder {
        ValueEncoder(node: node.member(key.stringValue), special: special)
    }
}

private struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let node: Node
    let special: @Sendable (any Encodable) -> JSONValue?
    var codingPath: [any CodingKey] { [] }
    var count: Int {
        if case .array(let items) = node.content { return items.count }
        return 0
    }

    mutating func encodeNil() throws { node.element().content = .value(.null) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try ValueEncoder.encode(value, into: node.element(), special: special)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        let child = node.element()
        child.content = .object([])
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, special: special))
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = node.element()
        child.content = .array([])
        return UnkeyedEncoder(node: child, special: special)
    }
    mutating func superEncoder() -> any Encoder { ValueEncoder(node: node.element(), special: special) }
}

private struct SingleEncoder: SingleValueEncodingContainer {
    let node: Node
    let special: @Sendable (any Encodable) -> JSONValue?
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil() throws { node.content = .value(.null) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try ValueEncoder.encode(value, into: node, special: special)
    }
}

// MARK: - Decoding

private struct ValueDecoder: Decoder {
    let value: JSONValue
    var codingPath: [any CodingKey]
    let special: @Sendable (any Decodable.Type, JSONValue) throws -> (any Decodable)?
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func mismatch(_ expected: String) -> DecodingError {
        DecodingError.typeMismatch(
            Any.self, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(value)"))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let object) = value else { throw mismatch("an object") }
        var members: [String: JSONValue] = [:]
        for member in object.members { members[member.key] = member.value }
        return KeyedDecodingContainer(KeyedDecoder<Key>(members: members, codingPath: codingPath, special: special))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw mismatch("an array") }
        return UnkeyedDecoder(items: items, codingPath: codingPath, special: special)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        switch type {
        case is String.Type:
            guard case .string(let text) = value else { throw mismatch("a string") }
            return text as! T
        case is Bool.Type:
            guard case .bool(let flag) = value else { throw mismatch("a boolean") }
            return flag as! T
        case is Int64.Type:
            guard let number = value.int64Value else { throw mismatch("an integer") }
            return number as! T
        case is Int.Type:
            guard let number = value.int64Value, let int = Int(exactly: number) else { throw mismatch("an integer") }
            return int as! T
        case is Int32.Type:
            guard let number = value.int64Value, let int = Int32(exactly: number) else { throw mismatch("an integer") }
            return int as! T
        case is Double.Type:
            guard let number = value.doubleValue else { throw mismatch("a number") }
            return number as! T
        default:
            if let found = try special(type, value) {
                guard let typed = found as? T else { throw mismatch("\(T.self)") }
                return typed
            }
            return try T(from: self)
        }
    }
}

extension ValueDecoder: SingleValueDecodingContainer {
    func decodeNil() -> Bool { value == .null }
}

private struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]
    let special: @Sendable (any Decodable.Type, JSONValue) throws -> (any Decodable)?

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    func child(_ key: Key) throws -> ValueDecoder {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "no member '\(key.stringValue)'"))
        }
        return ValueDecoder(value: value, codingPath: codingPath + [key], special: special)
    }

    func decodeNil(forKey key: Key) throws -> Bool { (members[key.stringValue] ?? .null) == .null }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try child(key).decode(type) }
    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try child(key).container(keyedBy: type)
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try child(key).unkeyedContainer()
    }
    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: members["super"] ?? .null, codingPath: codingPath, special: special)
    }
    func superDecoder(forKey key: Key) throws -> any Decoder { try child(key) }
}

private struct UnkeyedDecoder: UnkeyedDecodingContainer {
    let items: [JSONValue]
    let codingPath: [any CodingKey]
    let special: @Sendable (any Decodable.Type, JSONValue) throws -> (any Decodable)?
    var currentIndex = 0

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    mutating func next() throws -> ValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                Any.self, .init(codingPath: codingPath, debugDescription: "the array has no more elements"))
        }
        defer { currentIndex += 1 }
        return ValueDecoder(
            value: items[currentIndex], codingPath: codingPath + [AnyKey(intValue: currentIndex)], special: special)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, items[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decode(type) }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try next().container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next() }
}
