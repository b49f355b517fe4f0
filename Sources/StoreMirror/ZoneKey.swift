import FoundationEssentials
import StoreBase
import StoreCloud
import StoreCrypto

/// The key of an encrypted zone, as the zone keeps it: one reserved record (`_storectl_zone_key`), which storectl
/// never shows as data. It holds a random 256-bit data key wrapped (AES-256-GCM) by a key derived from the
/// passphrase the account's devices share (scrypt), a check that proves the unwrapped key and the list of the
/// zone's encrypted fields belong together, and the older data keys (after a rotation), each wrapped by the current
/// data key, so that a record a device wrote before it noticed the rotation can still be read.
///
/// The server learns none of the keys: only ciphertext, the scrypt parameters and the salt.
public struct ZoneKeyRecord: Codable, Equatable, Sendable {
    /// The reserved record's name and type.
    public static let recordName = "_storectl_zone_key"
    public static let recordType = "_storectl_zone_key"
    /// The scrypt cost of a new key: N = 2^15, r = 8, p = 1 (32 MiB of memory, tens of milliseconds), once per
    /// process. `STORECTL_SCRYPT_LOG_N` sets log2(N) for keys made from then on (10...20); every key keeps its own.
    public static let defaultLogN = 15

    public struct Previous: Codable, Equatable, Sendable {
        public var generation: Int
        /// The older data key, sealed by this generation's data key.
        public var wrapped: String
    }

    /// The record's own format.
    public var format: Int = 1
    /// The data key's generation: 1 for the first key, one more at each rotation.
    public var generation: Int
    public var kdf: String = "scrypt"
    public var logN: Int
    public var r: Int
    public var p: Int
    /// base64 of the scrypt salt (16 random bytes).
    public var salt: String
    /// base64 of nonce || ciphertext || tag: the data key sealed by the passphrase's key.
    public var wrapped: String
    /// base64 of HMAC-SHA256(data key, what the record says): proves that the unwrapped key is this zone's and
    /// that the list of encrypted fields was written by a holder of the key.
    public var check: String
    /// Record type -> the fields the zone encrypts.
    public var fields: [String: [String]]
    public var previous: [Previous] = []

    enum CodingKeys: String, CodingKey {
        case format, generation, kdf, r, p, salt, wrapped, check, fields, previous
        case logN = "log_n"
    }

    /// The record's fields, as saved.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// Decodes a key record's fields; nil when they are not one.
    public static func decode(_ fields: String) -> ZoneKeyRecord? {
        try? JSONDecoder().decode(ZoneKeyRecord.self, from: Data(fields.utf8))
    }
}

/// The unwrapped keys of one zone, for one process. Never written anywhere.
public struct ZoneKeyring: Sendable {
    public var zone: String
    /// The current data key's generation; new ciphertext uses it.
    public var generation: Int
    /// Generation -> data key.
    var keys: [Int: [UInt8]]
    /// Record type -> the fields the zone encrypts (as its key record lists them).
    public var fields: [String: Set<String>]
    /// The key record's change tag when it was read (nil for a key made here and not saved yet).
    public var changeTag: String?
    /// The key record it was opened from.
    public var record: ZoneKeyRecord

    /// The data key of `generation`, if known.
    func key(_ generation: Int) -> [UInt8]? { keys[generation] }

    /// A new zone key for `fields`, with a random data key wrapped by `passphrase`.
    /// - Throws: `StoreError` when libcrypto fails.
    public static func make(zone: String, passphrase: String, fields: [String: Set<String>], logN: Int) throws
        -> ZoneKeyring
    {
        let dataKey = try Crypto.randomBytes(32)
        var ring = ZoneKeyring(zone: zone, generation: 1, keys: [1: dataKey], fields: fields, changeTag: nil,
                               record: ZoneKeyRecord(generation: 1, logN: logN, r: 8, p: 1, salt: "", wrapped: "",
                                                     check: "", fields: [:]))
        ring.record = try ring.sealed(passphrase: passphrase, logN: logN)
        return ring
    }

    /// Opens a zone's key record with `passphrase`.
    /// - Throws: `WrongPassphrase` when the passphrase does not unwrap it or its check fails; `StoreError` for a
    ///   record storectl cannot read.
    public static func open(_ record: ZoneKeyRecord, changeTag: String?, zone: String, passphrase: String) throws
        -> ZoneKeyring
    {
        guard record.format == 1, record.kdf == "scrypt", (1...22).contains(record.logN), (1...32).contains(record.r),
              (1...16).contains(record.p), let salt = Data(base64Encoded: record.salt),
              let wrapped = Data(base64Encoded: record.wrapped), let check = Data(base64Encoded: record.check)
        else {
            throw StoreError(.dataError, "the key record of zone '\(zone)' is not one this storectl can read "
                             + "(format \(record.format), kdf \(record.kdf))",
                             hint: "upgrade storectl on this device")
        }
        let kek = try Crypto.scrypt(password: Array(passphrase.utf8), salt: Array(salt), n: UInt64(1) << record.logN,
                                    r: UInt64(record.r), p: UInt64(record.p))
        let dataKey: [UInt8]
        do {
            dataKey = try AESGCM.open(key: kek, sealed: Array(wrapped), aad: wrapAAD(zone: zone, generation: record.generation))
        } catch is AESGCM.AuthenticationError {
            throw WrongPassphrase()
        }
        guard try Crypto.constantTimeEqual(Array(check), checkValue(dataKey, record, zone: zone)) else {
            throw WrongPassphrase()
        }
        var keys = [record.generation: dataKey]
        for old in record.previous {
            guard let sealed = Data(base64Encoded: old.wrapped),
                  let key = try? AESGCM.open(key: dataKey, sealed: Array(sealed),
                                             aad: previousAAD(zone: zone, generation: old.generation))
            else { throw WrongPassphrase() }
            keys[old.generation] = key
        }
        return ZoneKeyring(zone: zone, generation: record.generation, keys: keys,
                           fields: record.fields.mapValues(Set.init), changeTag: changeTag, record: record)
    }

    /// The key record for this keyring, its data key wrapped by `passphrase` under a new salt.
    public func sealed(passphrase: String, logN: Int? = nil) throws -> ZoneKeyRecord {
        guard let dataKey = keys[generation] else {
            throw StoreError(.software, "zone key generation \(generation) is missing from its keyring")
        }
        let cost = logN ?? record.logN
        let salt = try Crypto.randomBytes(16)
        let kek = try Crypto.scrypt(password: Array(passphrase.utf8), salt: salt, n: UInt64(1) << cost, r: 8, p: 1)
        var out = ZoneKeyRecord(generation: generation, logN: cost, r: 8, p: 1,
                                salt: Data(salt).base64EncodedString(),
                                wrapped: Data(try AESGCM.seal(key: kek, plaintext: dataKey,
                                                              aad: Self.wrapAAD(zone: zone, generation: generation)))
                                    .base64EncodedString(),
                                check: "", fields: fields.mapValues { $0.sorted() })
        out.previous = try keys.keys.filter { $0 != generation }.sorted().map { old in
            ZoneKeyRecord.Previous(generation: old, wrapped: Data(try AESGCM.seal(
                key: dataKey, plaintext: keys[old] ?? [], aad: Self.previousAAD(zone: zone, generation: old)))
                .base64EncodedString())
        }
        out.check = Data(try Self.checkValue(dataKey, out, zone: zone)).base64EncodedString()
        return out
    }

    /// This keyring with a new random data key as the next generation; the older keys stay, to read records
    /// written with them.
    public func rotated() throws -> ZoneKeyring {
        var next = self
        next.generation = (keys.keys.max() ?? generation) + 1
        next.keys[next.generation] = try Crypto.randomBytes(32)
        return next
    }

    /// Whether the zone encrypts `field` of `type`.
    public func encrypts(_ type: String, _ field: String) -> Bool { fields[type]?.contains(field) ?? false }

    // MARK: Associated data

    static func wrapAAD(zone: String, generation: Int) -> [UInt8] {
        Array("storectl zone key v1\u{0}\(zone)\u{0}\(generation)".utf8)
    }

    static func previousAAD(zone: String, generation: Int) -> [UInt8] {
        Array("storectl previous zone key v1\u{0}\(zone)\u{0}\(generation)".utf8)
    }

    static func checkValue(_ dataKey: [UInt8], _ record: ZoneKeyRecord, zone: String) throws -> [UInt8] {
        let listed = record.fields.keys.sorted().flatMap { type in (record.fields[type] ?? []).sorted().map { "\(type).\($0)" } }
        let previous = record.previous.map { "\($0.generation):\($0.wrapped)" }
        let text = (["storectl zone key check v1", zone, String(record.generation)] + listed + ["--"] + previous)
            .joined(separator: "\u{0}")
        return try Crypto.hmacSHA256(key: dataKey, Array(text.utf8))
    }

    /// The associated data of one encrypted field: the value cannot be moved to another zone, record or field.
    static func fieldAAD(zone: String, type: String, name: String, field: String, generation: Int) -> [UInt8] {
        Array("storectl field v1\u{0}\(zone)\u{0}\(type)\u{0}\(name)\u{0}\(field)\u{0}\(generation)".utf8)
    }

    // MARK: Values

    /// The envelope of one field's JSON text: base64 of version (1) || generation (4 bytes, big-endian) || nonce ||
    /// ciphertext || tag.
    func seal(_ json: String, type: String, name: String, field: String) throws -> String {
        guard let key = keys[generation] else {
            throw StoreError(.software, "zone key generation \(generation) is missing from its keyring")
        }
        let g = UInt32(generation)
        let header: [UInt8] = [1, UInt8(g >> 24), UInt8((g >> 16) & 0xff), UInt8((g >> 8) & 0xff), UInt8(g & 0xff)]
        let sealed = try AESGCM.seal(key: key, plaintext: Array(json.utf8),
                                     aad: Self.fieldAAD(zone: zone, type: type, name: name, field: field,
                                                        generation: generation))
        return Data(header + sealed).base64EncodedString()
    }

    /// The generation of the key an envelope was sealed with; nil when it is not an envelope.
    static func generation(of envelope: String) -> Int? {
        guard let bytes = Data(base64Encoded: envelope).map(Array.init), bytes.count > 5, bytes[0] == 1 else { return nil }
        return Int(UInt32(bytes[1]) << 24 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 8 | UInt32(bytes[4]))
    }

    /// The JSON text an envelope holds; nil when it does not authenticate (another record's or field's value,
    /// tampered bytes, a key this keyring does not have) or is not an envelope.
    func open(_ envelope: String, type: String, name: String, field: String) -> (json: String, generation: Int)? {
        guard let bytes = Data(base64Encoded: envelope).map(Array.init), bytes.count > 5 + 12 + 16,
              let generation = Self.generation(of: envelope), let key = keys[generation],
              let plain = try? AESGCM.open(key: key, sealed: Array(bytes[5...]),
                                           aad: Self.fieldAAD(zone: zone, type: type, name: name, field: field,
                                                              generation: generation)),
              let json = String(validating: plain, as: UTF8.self)
        else { return nil }
        return (json, generation)
    }
}

/// The passphrase does not open the zone's key.
public struct WrongPassphrase: Error, Equatable {}
