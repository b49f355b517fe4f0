import FoundationEssentials
import StoreBase
import StoreCloud
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite

/// Fields encrypted on the device (`entities.<table>.encrypted`, `cloud.encryption_key`): every engine this
/// handle opens goes through `EncryptedCloud`, and the zone's key is opened before anything is written.
extension StoreHandle {
    /// Table -> the columns its `encrypted:` lists.
    public var encryptedColumns: [String: [String]] {
        var out: [String: [String]] = [:]
        for e in settings.entities { if let list = e.encrypted, !list.isEmpty { out[e.name] = list } }
        return out
    }

    /// The passphrase, when the config has a non-empty one.
    var encryptionPassphrase: String? {
        guard let value = settings.cloud?.encryptionKey?.value, !value.isEmpty else { return nil }
        return value
    }

    /// log2 of scrypt's N for keys made by this process (`STORECTL_SCRYPT_LOG_N`, 10...20).
    var scryptLogN: Int {
        if let n = environment["STORECTL_SCRYPT_LOG_N"].flatMap(Int.init), (10...20).contains(n) { return n }
        return ZoneKeyRecord.defaultLogN
    }

    /// `backend` as this store's engine sees it, its zone's key read and opened (a key opened by an earlier round
    /// of this handle is not derived again unless the key record changed).
    /// - Throws: `CloudError` (exit 77) for a zone whose key the store's passphrase does not open, or an encrypted
    ///   zone without a passphrase.
    func encryptedCloud(_ backend: any CloudDatabase) throws -> EncryptedCloud {
        if let wrapped = backend as? EncryptedCloud { return wrapped }
        let cloud = try cloudSettings()
        let wrapped = EncryptedCloud(base: backend, zone: cloud.zone, storeName: settings.name,
                                     configured: encryptedColumns.mapValues(Set.init), passphrase: encryptionPassphrase,
                                     keyring: zoneKeyring?.zone == cloud.zone ? zoneKeyring : nil,
                                     zoneEncrypted: false)
        if !encryptedColumns.isEmpty || zoneKeyring != nil || !zoneKeyProbed {
            try wrapped.prepare(write: false, device: "")
            zoneKeyProbed = true
            zoneKeyring = wrapped.keyring
        }
        return wrapped
    }

    /// The new target of `migrate --cloud` as its engine sees it: the fields this store's config encrypts and
    /// those the old zone encrypted (as the final sync found them) are sealed there too, under the new zone's key.
    func movedEncryptedCloud(_ backend: any CloudDatabase, zone: String) throws -> EncryptedCloud {
        var fields = encryptedColumns.mapValues(Set.init)
        for (type, more) in zoneKeyring?.fields ?? [:] { fields[type, default: []].formUnion(more) }
        for (type, more) in try rememberedZoneFields() { fields[type, default: []].formUnion(more) }
        let wrapped = EncryptedCloud(base: backend, zone: zone, storeName: settings.name, configured: fields,
                                     passphrase: encryptionPassphrase, keyring: nil, zoneEncrypted: false)
        try wrapped.prepare(write: false, device: "")
        return wrapped
    }

    /// Opens the zone's key on the container `requireAvailableAccount` checked, before anything is written
    /// (`mode cloud`'s account step, `sync`, `watch`).
    /// - Throws: `CloudError` (exit 77).
    func requireZoneKey() throws {
        try checkEncryptedColumns()
        guard let checked = checkedCloud else { return }
        checkedSealed = try encryptedCloud(checked)
    }

    /// Refuses (65) an `encrypted:` column that `cloud check` refuses (not a column of the table, part of its
    /// primary key, a foreign key, UNIQUE), before the zone's list of encrypted fields, which only grows, takes it:
    /// a column added to `encrypted:` on a store already in cloud mode is checked by its next `sync`.
    /// - Throws: `StoreError` (65).
    func checkEncryptedColumns() throws {
        guard !encryptedColumns.isEmpty, exists else { return }
        let problems = try CloudCheck.encryptionProblems(try database(), encrypted: encryptedColumns,
                                                         tracked: Set(settings.entities.map(\.name)),
                                                         uniqueRules: uniqueRules)
        guard let first = problems.first else { return }
        throw StoreError(.dataError, "store '\(settings.name)': " + first
                         + (problems.count > 1 ? " (and \(problems.count - 1) more)" : "") + "; nothing was synced",
                         hint: "fix stores.\(settings.name).entities.<table>.encrypted in \(config.path); "
                             + "'storectl cloud check' lists every problem")
    }

    /// Makes the zone's key, or adds this store's encrypted fields to its list, when the store may write the zone;
    /// records the zone's records then need sealing again (`ZoneReencryption`, after the sync).
    func prepareZoneKey(_ cloud: EncryptedCloud, mirror: Mirror) throws {
        zoneKeyring = cloud.keyring ?? zoneKeyring
        guard !encryptedColumns.isEmpty, mirror.access == .owner || mirror.access == .readWrite else {
            if !encryptedColumns.isEmpty { try refuseFieldsTheZoneLeavesInClear(cloud) }
            try rememberZoneFields(try database())
            return
        }
        // The key this round opened already lists every field the config encrypts: nothing to write.
        if let ring = cloud.keyring, encryptedColumns.allSatisfy({ Set($0.value).isSubset(of: ring.fields[$0.key] ?? []) }) {
            try rememberZoneFields(try database())
            return
        }
        // A read-only share learns it from its first round's zone: asked here, before anything is noted or saved.
        if let sharing = cloud.base as? any CloudSharing,
           let access = try? sharing.zoneAccess(try cloudSettings().zone), access.level == .readOnly
        {
            try refuseFieldsTheZoneLeavesInClear(cloud)
            try rememberZoneFields(try database())
            return
        }
        let db = try database()
        do {
            // The work is noted before the key record that makes it necessary is saved (a kill between the two
            // leaves work that finds nothing to do, never clear values that nobody seals).
            try cloud.prepare(write: true, device: mirror.device, logN: scryptLogN) { added in
                try db.transaction {
                    let pending = try MirrorState.meta(db, .reencryptPending)
                    // A bare `fields` (written before the added fields were kept) takes every field in clear already.
                    guard var accepting = Self.clearFields(pending: pending) else { return }
                    // A field this store saw the zone encrypt before never takes a value in clear again: a key
                    // record put back to an older copy (listing fewer fields) would otherwise let the server's
                    // clear values be sealed as genuine.
                    let seen = try self.rememberedZoneFields()
                    for (type, fields) in added {
                        let fresh = fields.subtracting(seen[type] ?? [])
                        if !fresh.isEmpty { accepting[type, default: []].formUnion(fresh) }
                    }
                    try MirrorState.setMeta(db, .reencryptPending, Self.pendingValue(clearFields: accepting))
                }
            }
        } catch let error as CloudError where error.kind == .permission && cloud.keyring != nil {
            // A read-only share: the zone's key opens, and its list is the owner's to change.
            try refuseFieldsTheZoneLeavesInClear(cloud)
            return
        }
        zoneKeyring = cloud.keyring
        try rememberZoneFields(db)
    }

    /// Refuses (65) a store that may not change the zone's list of encrypted fields (a read-only share) and whose
    /// config encrypts a column the list leaves out: the zone's writers send that column in clear, which every
    /// record would then be set aside for, and which the config says must not travel in clear.
    /// - Throws: `StoreError` (65).
    func refuseFieldsTheZoneLeavesInClear(_ cloud: EncryptedCloud) throws {
        let listed = cloud.keyring?.fields ?? [:]
        let missing = encryptedColumns.sorted { $0.key < $1.key }.flatMap { table, columns in
            columns.filter { !(listed[table]?.contains($0) ?? false) }.map { "\(table).\($0)" }
        }
        guard !missing.isEmpty else { return }
        let target = try cloudSettings()
        throw StoreError(.dataError, "store '\(settings.name)' encrypts \(missing.joined(separator: ", ")), which zone "
                         + "'\(target.zone)' of \(target.container) does not encrypt, and its share of the zone is "
                         + "read-only: it cannot add them to the zone's list; nothing was synced",
                         hint: "ask the zone's owner to add them to entities.<table>.encrypted and sync, or remove "
                             + "them from stores.\(settings.name).entities.<table>.encrypted in \(config.path)")
    }

    /// Keeps the zone's list of encrypted fields in the store (`zone_encrypted_fields`), written when it changed:
    /// `migrate --cloud --no-final-sync` seals them in the new zone without reading the old one.
    func rememberZoneFields(_ db: Connection) throws {
        guard let fields = zoneKeyring?.fields, !fields.isEmpty else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let text = String(decoding: try encoder.encode(fields.mapValues { $0.sorted() }), as: UTF8.self)
        guard try MirrorState.meta(db, .zoneEncryptedFields) != text else { return }
        try db.transaction { try MirrorState.setMeta(db, .zoneEncryptedFields, text) }
    }

    /// The zone's list of encrypted fields as this store last saw it.
    func rememberedZoneFields() throws -> [String: Set<String>] {
        guard exists, let text = try MirrorState.meta(try database(), .zoneEncryptedFields),
              let decoded = try? JSONDecoder().decode([String: [String]].self, from: Data(text.utf8))
        else { return [:] }
        return decoded.mapValues(Set.init)
    }

    /// The `reencrypt_pending` value: `rotate` (every record sealed with the current key, no clear value taken),
    /// or `fields:` and the fields just added to the zone's list as JSON (record type -> fields), whose values the
    /// records sent before hold in clear.
    static func pendingValue(clearFields: [String: Set<String>]) -> String {
        guard !clearFields.isEmpty else { return "rotate" }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(clearFields.mapValues { $0.sorted() })) ?? Data("{}".utf8)
        return "fields:" + String(decoding: data, as: UTF8.self)
    }

    /// The fields whose values `ZoneReencryption` takes in clear for a `reencrypt_pending` value: none for
    /// `rotate` (a clear value in a field the zone already encrypted was put there by the server, and stays set
    /// aside), those it lists for `fields:...`, and every field (nil) for a bare `fields`.
    static func clearFields(pending: String?) -> [String: Set<String>]? {
        guard let pending, pending != "rotate" else { return [:] }
        guard pending.hasPrefix("fields:"),
              let decoded = try? JSONDecoder().decode([String: [String]].self, from: Data(pending.dropFirst(7).utf8))
        else { return nil }
        return decoded.mapValues(Set.init)
    }

    /// Seals again the zone's records sent in clear or with an older key, when the store has such work left (a
    /// field added to `encrypted:`, `cloud rekey --rotate`, either interrupted). Returns how many were sent again.
    @discardableResult
    func finishReencryption(_ mirror: Mirror, progress: (Int, Int) -> Void = { _, _ in }) throws -> Int {
        let db = try database()
        guard let pending = try MirrorState.meta(db, .reencryptPending),
              mirror.access == .owner || mirror.access == .readWrite, let cloud = mirror.cloud as? EncryptedCloud
        else { return 0 }
        let report = try ZoneReencryption.run(cloud: cloud, db: db, device: mirror.device,
                                              acceptingClear: Self.clearFields(pending: pending), progress: progress)
        if report.complete {
            try db.transaction { try MirrorState.setMeta(db, .reencryptPending, nil) }
        }
        if report.unreadable > 0 {
            log("\(report.unreadable) record(s) of zone '\(cloud.keyring?.zone ?? "")' could not be opened and were "
                + "not sealed again (set aside; 'storectl status' lists them)")
        }
        return report.resent
    }
}

/// What `storectl cloud rekey` did.
public struct RekeyReport: Sendable, Codable, Equatable {
    public var store: String
    public var container: String
    public var zone: String
    /// The data key's generation now (one more after `--rotate`).
    public var generation: Int
    /// Whether a new data key was made (`--rotate`).
    public var rotated: Bool
    /// Records of the zone sealed again with the new data key.
    public var resent: Int
    /// Whether every record of the zone is now sealed with the current key (false: a record changed meanwhile or
    /// could not be opened; the next `sync` of this store goes on).
    public var complete: Bool
}

extension StoreHandle {
    /// `storectl cloud rekey`: syncs, then wraps the zone's data key with `newPassphrase` (the config's passphrase
    /// must open it); with `rotate`, makes a new data key and seals every record of the zone again with it. The
    /// other devices need the new passphrase from then on (exit 77 until they have it).
    /// - Throws: `CloudError` (77: the config's passphrase does not open the key, or the account may not write
    ///   the zone), `StoreError` (65: the zone has no key).
    public func rekey(newPassphrase: String, rotate: Bool, progress: (String, Int, Int?) -> Void = { _, _, _ in })
        throws -> RekeyReport
    {
        try requireExists()
        guard try storeMode() == .cloud else {
            throw StoreError(.config, "store '\(settings.name)' is in local mode; 'cloud rekey' changes the key of the "
                             + "zone it syncs with", hint: "run 'storectl mode cloud' first")
        }
        guard !newPassphrase.isEmpty else { throw StoreError(.usage, "the new passphrase is empty") }
        let cloud = try cloudSettings()
        _ = try requireAvailableAccount()
        try requireZoneKey()
        let mirror = try openMirror()
        _ = try mirror.sync { progress($0, $1, $2) }
        guard let sealed = mirror.cloud as? EncryptedCloud, let ring = sealed.keyring else {
            throw StoreError(.dataError, "zone '\(cloud.zone)' of \(cloud.container) has no key: nothing in it is encrypted",
                             hint: "list the columns to encrypt in stores.\(settings.name).entities.<table>.encrypted, "
                                 + "set stores.\(settings.name).cloud.encryption_key, and run 'storectl sync'")
        }
        guard mirror.access == .owner || mirror.access == .readWrite else {
            throw CloudError(.permission, "account '\(cloud.account ?? "")' has a read-only share of zone "
                             + "'\(cloud.zone)': only the owner or a read-write participant changes its key",
                             hint: "ask the zone's owner to run 'storectl cloud rekey'")
        }
        let next = rotate ? try ring.rotated() : ring
        let db = try database()
        if rotate {
            // The work is noted before the key record that makes it necessary is saved: a kill between the two
            // leaves the next sync to seal the zone's records with the new key (or to find nothing to do, when the
            // key was not replaced). Fields added and not all sealed yet stay taken in clear.
            try db.transaction {
                if try MirrorState.meta(db, .reencryptPending) == nil {
                    try MirrorState.setMeta(db, .reencryptPending, "rotate")
                }
            }
        }
        guard try sealed.replaceKey(next, passphrase: newPassphrase, device: mirror.device, logN: scryptLogN) else {
            throw CloudError(.temporary, "the key of zone '\(cloud.zone)' changed while it was being replaced",
                             hint: "another device changed it; run 'storectl sync' with the current passphrase, then "
                                 + "'storectl cloud rekey' again")
        }
        zoneKeyring = sealed.keyring
        Failpoint.hit("rekey.after-key")
        var resent = 0
        var complete = true
        if rotate {
            resent = try finishReencryption(mirror) { looked, _ in progress("reseal", looked, nil) }
            complete = try MirrorState.meta(db, .reencryptPending) == nil
        }
        return RekeyReport(store: settings.name, container: cloud.container, zone: cloud.zone,
                           generation: sealed.keyring?.generation ?? next.generation, rotated: rotate, resent: resent,
                           complete: complete)
    }
}
