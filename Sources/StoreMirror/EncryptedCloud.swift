import FoundationEssentials
import StoreBase
import StoreCloud
import StoreSQLite
import Synchronization

/// The cloud as the engine sees it when fields are encrypted: every record saved has the zone's encrypted fields
/// sealed on the device, every record fetched has them opened, and the zone's key record is never shown as data.
///
/// The engine above works on plaintext only (merges, `verify`, dedup, the record map's fingerprints); the server
/// below holds ciphertext only. A record whose encrypted field does not open (tampered, moved from another record
/// or field, a key this device lacks) or arrives in clear is handed up with a `rejection`, so the import sets it
/// aside and `status` reports it: it is never applied.
///
/// Every store's engine goes through it, encrypted or not: a store without a key that meets an encrypted zone is
/// refused (exit 77) before it applies a record it cannot read.
public final class EncryptedCloud: CloudDatabase, @unchecked Sendable {
    // @unchecked Sendable: the only mutable state is `state`, behind its mutex; `base` is used as the engine uses
    // any backend.

    /// The backend.
    public let base: any CloudDatabase
    /// The store's zone.
    let zone: String
    /// The store's name and the config's setting, for messages.
    let storeName: String
    /// Record type -> the fields this store's config encrypts.
    let configured: [String: Set<String>]
    /// The passphrase, when the config has one.
    private let passphrase: String?

    private struct State {
        var keyring: ZoneKeyring?
        /// The zone has a key record (known even without a passphrase).
        var zoneEncrypted = false
    }
    private let state: Mutex<State>

    public init(base: any CloudDatabase, zone: String, storeName: String, configured: [String: Set<String>],
                passphrase: String?, keyring: ZoneKeyring?, zoneEncrypted: Bool)
    {
        self.base = base
        self.zone = zone
        self.storeName = storeName
        self.configured = configured
        self.passphrase = passphrase
        state = Mutex(State(keyring: keyring, zoneEncrypted: zoneEncrypted || keyring != nil))
    }

    /// Whether this store's config (or the zone it moved from) asks for fields to be sealed.
    public var sealsFields: Bool { configured.values.contains { !$0.isEmpty } }

    /// The same sealing over another backend (the same zone, the same key): `verify` after `migrate --cloud`.
    public func over(_ other: any CloudDatabase) -> EncryptedCloud {
        let s = state.withLock { $0 }
        return EncryptedCloud(base: other, zone: zone, storeName: storeName, configured: configured,
                              passphrase: passphrase, keyring: s.keyring, zoneEncrypted: s.zoneEncrypted)
    }

    /// The keyring in use.
    public var keyring: ZoneKeyring? { state.withLock { $0.keyring } }

    // MARK: Errors

    /// The store has no passphrase, or not the right one, for its zone (exit 77).
    public static func keyError(store: String, zone: String, container: String, missing: Bool) -> ZoneKeyError {
        ZoneKeyError(store: store, zone: zone, container: container, missing: missing)
    }

    // MARK: The zone's key

    /// What `prepare` found and did.
    public struct Preparation: Equatable, Sendable {
        /// The zone is encrypted (it has a key record, or this call made one).
        public var encrypted = false
        /// This call made the zone's key, or added fields to its list: records already in the zone must be sent
        /// again with those fields sealed (`ZoneReencryption`).
        public var fieldsAdded: [String: Set<String>] = [:]
        /// This call made the zone's first key.
        public var created = false
    }

    /// Reads the zone's key record and opens it with the passphrase, before anything is written: a wrong or
    /// missing passphrase is refused (exit 77). With `write`, a store whose config encrypts fields makes the zone's
    /// key when it has none (creating the zone) and adds its fields to the zone's list.
    /// - Throws: `CloudError` (exit 77 for a key this store cannot open), `StoreError`.
    @discardableResult
    /// `beforeAdding` is called with the fields whose values records of the zone hold in clear, before the key record
    /// that adds them to the zone's list is saved: the store notes the work first, so that a kill between the two
    /// never leaves clear values that nobody seals.
    public func prepare(write: Bool, device: String, logN: Int = ZoneKeyRecord.defaultLogN,
                        beforeAdding: ([String: Set<String>]) throws -> Void = { _ in }) throws -> Preparation {
        var result = Preparation()
        if sealsFields, passphrase?.isEmpty ?? true {
            throw ZoneKeyError(store: storeName, zone: zone, container: base.container, missing: true,
                               configured: configured.filter { !$0.value.isEmpty }.keys.sorted())
        }
        for _ in 0..<4 {
            let record: CloudRecord?
            do {
                record = try base.fetchRecord(zone: zone, recordName: ZoneKeyRecord.recordName)
            } catch let error as CloudError where error.kind == .zoneNotFound {
                record = nil
            }
            if let record, !record.deleted {
                try noteKeyRecord(record)
                result.encrypted = true
                guard write, let ring = keyring, let passphrase else { return result }
                var missing: [String: Set<String>] = [:]
                for (type, fields) in configured {
                    let more = fields.subtracting(ring.fields[type] ?? [])
                    if !more.isEmpty { missing[type] = more }
                }
                guard !missing.isEmpty else { return result }
                var extended = ring
                for (type, more) in missing { extended.fields[type, default: []].formUnion(more) }
                let sealed = try extended.sealed(passphrase: passphrase)
                try beforeAdding(missing)
                if try saveKey(sealed, expectedTag: record.changeTag, ring: extended, device: device) {
                    for (type, more) in missing { result.fieldsAdded[type, default: []].formUnion(more) }
                    return result
                }
                continue  // another device changed the key meanwhile: read it again
            }
            guard write, configured.values.contains(where: { !$0.isEmpty }) else { return result }
            guard let passphrase, !passphrase.isEmpty else {
                throw ZoneKeyError(store: storeName, zone: zone, container: base.container, missing: true,
                                   configured: configured.filter { !$0.value.isEmpty }.keys.sorted())
            }
            let info = try base.ensureZone(zone)
            let ring = try ZoneKeyring.make(zone: zone, passphrase: passphrase, fields: configured, logN: logN)
            // Records already in the zone were sent in clear.
            if info.liveRecords > 0 || info.lastSeq > 0 { try beforeAdding(configured) }
            if try saveKey(ring.record, expectedTag: record?.changeTag, ring: ring, device: device) {
                result.encrypted = true
                result.created = true
                // Records already in the zone were sent in clear.
                if info.liveRecords > 0 || info.lastSeq > 0 { result.fieldsAdded = configured }
                return result
            }
        }
        throw CloudError(.temporary, "the key of zone '\(zone)' kept changing while store '\(storeName)' read it",
                         hint: "another device is changing it ('storectl cloud rekey'); run the command again")
    }

    /// Saves a key record; false when another device saved one first.
    private func saveKey(_ record: ZoneKeyRecord, expectedTag: String?, ring: ZoneKeyring, device: String) throws -> Bool {
        let save = RecordSave(recordName: ZoneKeyRecord.recordName, recordType: ZoneKeyRecord.recordType,
                              fields: record.json(), expectedTag: expectedTag)
        guard case .saved(let tag, _)? = try base.save(zone: zone, [save], device: device, mark: nil,
                                                       schemaVersion: nil, atomic: true).first
        else { return false }
        var saved = ring
        saved.record = record
        saved.changeTag = tag
        state.withLock { $0.keyring = saved; $0.zoneEncrypted = true }
        return true
    }

    /// Replaces the zone's key with `ring` (its record sealed by `passphrase`): `cloud rekey`.
    /// - Returns: false when another device changed the key meanwhile.
    public func replaceKey(_ ring: ZoneKeyring, passphrase: String, device: String,
                           logN: Int = ZoneKeyRecord.defaultLogN) throws -> Bool {
        guard let current = keyring else {
            throw StoreError(.dataError, "zone '\(zone)' has no key to change", hint: "encrypt a field first "
                             + "(entities.<table>.encrypted), and sync")
        }
        return try saveKey(try ring.sealed(passphrase: passphrase, logN: logN), expectedTag: current.changeTag, ring: ring,
                           device: device)
    }

    // MARK: Fields

    /// The fields of `type` that are sealed: the zone's list and this store's config.
    func sealedFields(_ type: String, _ ring: ZoneKeyring?) -> Set<String> {
        (ring?.fields[type] ?? []).union(configured[type] ?? [])
    }

    /// `save` with the encrypted fields sealed.
    func sealed(_ save: RecordSave, ring: ZoneKeyring, json: Connection) throws -> RecordSave {
        guard !save.deleted else { return save }
        let fields = sealedFields(save.recordType, ring)
        guard !fields.isEmpty else { return save }
        var out = save
        for field in fields.sorted() {
            let path = Self.path(field)
            guard let value = try Self.row(json, "SELECT ?1 -> ?2", [out.fields, path])?[0].string else { continue }
            let envelope = try ring.seal(value, type: save.recordType, name: save.recordName, field: field)
            out.fields = try Self.row(json, "SELECT json_set(?1, ?2, json_object('$enc', ?3))",
                                      [out.fields, path, envelope])?[0].string ?? out.fields
        }
        return out
    }

    /// `record` with its encrypted fields opened, or set aside (`rejection`) when one does not open.
    /// A field of `acceptingClear` in clear is taken as it is (`ZoneReencryption` seals the records sent before
    /// the field was encrypted); any other encrypted field in clear sets the record aside.
    func opened(_ record: CloudRecord, ring: ZoneKeyring?, json: Connection, acceptingClear: Set<String> = []) throws
        -> CloudRecord
    {
        guard !record.deleted, record.rejection == nil else { return record }
        let fields = sealedFields(record.recordType, ring)
        guard !fields.isEmpty else { return record }
        var out = record
        for field in fields.sorted() {
            let path = Self.path(field)
            guard let row = try Self.row(json, "SELECT json_type(?1, ?2), json_extract(?1, ?3)",
                                         [out.fields, path, path + ".\"$enc\""]),
                  let type = row[0].string
            else { continue }  // the record leaves the field out
            guard type == "object", let envelope = row[1].string else {
                if acceptingClear.contains(field) { continue }
                out.rejection = "its field '\(field)' arrived unencrypted, and zone '\(zone)' encrypts it"
                out.rejectionHint = "a device that saved it lacks '\(field)' in entities.\(record.recordType).encrypted "
                    + "(add it there, and sync that device: its records are sealed again), or the record was written "
                    + "into the container by hand; the record is not applied until a sealed version arrives"
                return out
            }
            guard let ring else { throw Self.keyError(store: storeName, zone: zone, container: base.container, missing: true) }
            guard let (plain, _) = ring.open(envelope, type: record.recordType, name: record.recordName, field: field)
            else {
                out.rejection = "its field '\(field)' does not decrypt with the zone's key: tampered, copied from "
                    + "another record or field, or sealed with a key this device does not have"
                out.rejectionHint = "the record is not applied: a device that holds the row can send it again "
                    + "(change the row there, or 'storectl cloud rekey --rotate' seals every record again); check "
                    + "who can write the container"
                return out
            }
            guard try Self.row(json, "SELECT json_valid(?1)", [plain])?[0].int64 == 1 else {
                out.rejection = "its field '\(field)' decrypts to something that is not a value"
                out.rejectionHint = "the record is not applied; a device that holds the row can send it again"
                return out
            }
            out.fields = try Self.row(json, "SELECT json_set(?1, ?2, json(?3))", [out.fields, path, plain])?[0].string
                ?? out.fields
        }
        return out
    }

    /// The first row of a one-row query on the scratch connection (its statements are cached: a page seals or
    /// opens the same few statements thousands of times).
    static func row(_ json: Connection, _ sql: String, _ arguments: [any SQLBindable]) throws -> [Value]? {
        var out: [Value]?
        try json.cached(sql).forEach(arguments) { s in
            if out == nil { out = (0..<s.columnCount).map { s.column($0) } }
        }
        return out
    }

    /// A JSON path naming one member, whatever its characters (a `"` in a column name is refused by `cloud check`).
    static func path(_ field: String) -> String { "$.\"" + field + "\"" }

    /// A scratch connection for JSON work, one per call: the engine fetches on one thread while it saves on another.
    private func scratch() throws -> Connection { try Connection(path: ":memory:", wal: false) }

    /// The zone's key record seen in a fetch: a key changed by `cloud rekey` is opened again (or refused).
    private func noteKeyRecord(_ record: CloudRecord) throws {
        guard record.zone == zone || record.zone.isEmpty else { return }
        let current = state.withLock { $0 }
        if record.deleted { return }
        guard let passphrase, !passphrase.isEmpty else {
            state.withLock { $0.zoneEncrypted = true }
            throw Self.keyError(store: storeName, zone: zone, container: base.container, missing: true)
        }
        if current.keyring?.changeTag == record.changeTag { return }
        if let why = record.rejection {
            // A key record saved by an account that may not write the zone is no key of the zone's.
            throw StoreError(.dataError, "the key record of zone '\(zone)' in \(base.container) is not the zone's: \(why)",
                             hint: "the zone's owner can save it again with 'storectl cloud rekey'; check who can write "
                                 + "the container")
        }
        guard let decoded = ZoneKeyRecord.decode(record.fields) else {
            throw StoreError(.dataError, "the key record of zone '\(zone)' in \(base.container) is not one storectl can read",
                             hint: "upgrade storectl on this device")
        }
        do {
            let ring = try ZoneKeyring.open(decoded, changeTag: record.changeTag, zone: zone, passphrase: passphrase)
            state.withLock { $0.keyring = ring; $0.zoneEncrypted = true }
        } catch is WrongPassphrase {
            throw Self.keyError(store: storeName, zone: zone, container: base.container, missing: false)
        }
    }

    /// Opens every record of a fetch, dropping the key record.
    private func openAll(_ records: [CloudRecord]) throws -> [CloudRecord] {
        if let key = records.last(where: { $0.recordType == ZoneKeyRecord.recordType
                                            && $0.recordName == ZoneKeyRecord.recordName })
        {
            try noteKeyRecord(key)
        }
        let (ring, encrypted) = state.withLock { ($0.keyring, $0.zoneEncrypted) }
        guard ring != nil || !configured.isEmpty || encrypted else {
            return records.filter { !Self.isKeyRecord($0) }
        }
        let json = try scratch()
        return try records.compactMap { record in
            Self.isKeyRecord(record) ? nil : try opened(record, ring: ring, json: json)
        }
    }

    static func isKeyRecord(_ record: CloudRecord) -> Bool {
        record.recordName == ZoneKeyRecord.recordName
    }

    // MARK: CloudDatabase

    public var container: String { base.container }
    public var displayURL: String { base.displayURL }
    public func accountStatus() -> AccountStatusReport { base.accountStatus() }

    public func roundZoneInfo(_ zone: String, device: String) throws -> ZoneInfo? {
        try base.roundZoneInfo(zone, device: device)
    }

    public func zoneInfo(_ zone: String, countLive: Bool) throws -> ZoneInfo? {
        guard var info = try base.zoneInfo(zone, countLive: countLive) else { return nil }
        // The key record is no row's.
        if countLive, zone == self.zone, state.withLock({ $0.zoneEncrypted }), info.liveRecords > 0 {
            info.liveRecords -= 1
        }
        return info
    }

    public func ensureZone(_ zone: String) throws -> ZoneInfo { try base.ensureZone(zone) }

    public func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int, excludingDevice: String?) throws
        -> ChangeBatch
    {
        var batch = try base.fetchChanges(zone: zone, since: token, limit: limit, excludingDevice: excludingDevice)
        batch.records = try openAll(batch.records)
        return batch
    }

    public var fetchesConcurrently: Bool { base.fetchesConcurrently }

    public func fetchRecord(zone: String, recordName: String) throws -> CloudRecord? {
        guard recordName != ZoneKeyRecord.recordName, let record = try base.fetchRecord(zone: zone, recordName: recordName)
        else { return nil }
        return try openAll([record]).first
    }

    public func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?,
                     atomic: Bool) throws -> [SaveOutcome]
    {
        let ring = state.withLock { $0.keyring }
        var out = saves
        if saves.contains(where: { !$0.deleted && !sealedFields($0.recordType, ring).isEmpty }) {
            guard let ring else {
                throw Self.keyError(store: storeName, zone: zone, container: base.container, missing: passphrase == nil)
            }
            let json = try scratch()
            out = try saves.map { try sealed($0, ring: ring, json: json) }
        }
        let outcomes = try base.save(zone: zone, out, device: device, mark: mark, schemaVersion: schemaVersion,
                                     atomic: atomic)
        return try outcomes.map { outcome in
            guard case .conflict(let server?) = outcome else { return outcome }
            return .conflict(server: try openAll([server]).first ?? server)
        }
    }

    public func schemaVersion(zone: String) throws -> ZoneSchemaVersion? { try base.schemaVersion(zone: zone) }

    public func raiseSchemaVersion(zone: String, to target: ZoneSchemaVersion, device: String, seenUpTo: Int64) throws
        -> SchemaRaise
    {
        try base.raiseSchemaVersion(zone: zone, to: target, device: device, seenUpTo: seenUpTo)
    }

    public func exportState(zone: String, device: String) throws -> DeviceExportState? {
        try base.exportState(zone: zone, device: device)
    }

    public func fetchDeviceRecords(zone: String, device: String, after seq: Int64, limit: Int) throws
        -> (records: [DeviceRecord], moreComing: Bool)
    {
        let fetched = try base.fetchDeviceRecords(zone: zone, device: device, after: seq, limit: limit)
        var records: [DeviceRecord] = []
        for item in fetched.records where !Self.isKeyRecord(item.record) {
            var copy = item
            copy.record = try openAll([item.record]).first ?? item.record
            records.append(copy)
        }
        return (records, fetched.moreComing)
    }

    public func createMarker(zone: String, name: String, device: String, payload: String) throws
        -> (created: Bool, marker: Marker)
    {
        try base.createMarker(zone: zone, name: name, device: device, payload: payload)
    }

    public func marker(zone: String, name: String) throws -> Marker? { try base.marker(zone: zone, name: name) }
    public func purgeZone(_ zone: String) throws {
        try base.purgeZone(zone)
        state.withLock { $0.keyring = nil; $0.zoneEncrypted = false }
    }
    public func registerDevice(storeID: String, name: String) throws { try base.registerDevice(storeID: storeID, name: name) }
    public func devices() throws -> [DeviceInfo] { try base.devices() }
    public func quietState(zone: String, known: QuietState?) throws -> QuietState? {
        try base.quietState(zone: zone, known: known)
    }
    public func quietState(zone: String, importedUpTo token: ServerChangeToken) -> QuietState? {
        base.quietState(zone: zone, importedUpTo: token)
    }
    public func takeWarnings() -> [String] { base.takeWarnings() }
    public func takeReplicaUse() -> ReplicaUse? { base.takeReplicaUse() }
}

/// A store without the passphrase that opens its zone's key (exit 77): refused before anything is written.
public struct ZoneKeyError: DiagnosedError, Equatable {
    public var storeName: String
    public var zone: String
    public var container: String
    /// The store has no passphrase at all (rather than a wrong one).
    public var missing: Bool
    /// The tables whose `encrypted:` lists need the missing passphrase (empty: the zone is encrypted already).
    public var configured: [String]

    public init(store: String, zone: String, container: String, missing: Bool, configured: [String] = []) {
        storeName = store
        self.zone = zone
        self.container = container
        self.missing = missing
        self.configured = configured
    }

    public var exitCode: ExitCode { .noPermission }
    public var store: String? { storeName }
    public var summary: String {
        if missing, let table = configured.first {
            return "store '\(storeName)' encrypts columns of zone '\(zone)' of \(container) "
                + "(stores.\(storeName).entities.\(table).encrypted) and has no passphrase "
                + "(stores.\(storeName).cloud.encryption_key is not set or empty); nothing was written"
        }
        return missing
            ? "zone '\(zone)' of \(container) is encrypted, and store '\(storeName)' has no passphrase for it "
                + "(stores.\(storeName).cloud.encryption_key); nothing was written"
            : "the passphrase of store '\(storeName)' (stores.\(storeName).cloud.encryption_key) does not open the "
                + "key of zone '\(zone)' of \(container); nothing was written"
    }
    public var hint: String? {
        missing
            ? "set stores.\(storeName).cloud.encryption_key to the zone's passphrase (e.g. \"${NOTES_KEY}\" with "
                + "NOTES_KEY exported; ask the zone's owner for it), then run the command again"
            : "set stores.\(storeName).cloud.encryption_key to the zone's current passphrase (after 'storectl cloud "
                + "rekey' every device needs the new one), then run the command again"
    }
}
