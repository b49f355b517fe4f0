import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// Sends again, sealed with the zone's current key, every live record of the zone whose encrypted fields are in
/// clear (sent before the field was encrypted) or sealed with an older key (before `cloud rekey --rotate`).
///
/// It works on the zone's records, not on this store's rows, so that a record this store cannot apply (set aside,
/// or of a table it does not have) is sealed too. Each record is saved with the change tag it was read at, its
/// values unchanged: a record another device changed meanwhile is left to that device (it seals what it sends)
/// and looked at again in the next pass. This store's record map follows the new tags of the records it holds
/// at the tag they were read at, so its next export is no conflict.
public enum ZoneReencryption {
    /// What a run did.
    public struct Report: Equatable, Sendable {
        /// Records saved again.
        public var resent = 0
        /// Records that could not be opened (set aside): left as they are.
        public var unreadable = 0
        /// Records changed by another device meanwhile, in the last pass.
        public var changedMeanwhile = 0
        /// Whether every record is now sealed with the current key.
        public var complete = false
    }

    /// Re-seals the zone `cloud` syncs. `progress` gets (records looked at, resent).
    ///
    /// `acceptingClear` (record type -> fields; nil: every field) names the fields just added to the zone's list,
    /// whose values earlier records hold in clear: those are sealed as they are. A clear value in any other field
    /// the zone encrypts was never sent by a device that knew the field is encrypted (the server, or someone who
    /// can write the container, put it there): the record stays set aside, never sealed with the zone's key.
    /// - Throws: `CloudError`, `SQLiteError`.
    public static func run(cloud: EncryptedCloud, db: Connection, device: String,
                           acceptingClear: [String: Set<String>]? = [:], pageSize: Int = 500,
                           progress: (Int, Int) -> Void = { _, _ in }) throws -> Report
    {
        guard let ring = cloud.keyring else { return Report(complete: true) }
        var report = Report()
        let json = try Connection(path: ":memory:", wal: false)
        let map = RecordMap(db)
        var looked = 0
        for _ in 0..<5 {
            var token: ServerChangeToken?
            var conflicts = 0
            while true {
                let batch = try cloud.base.fetchChanges(zone: cloud.zone, since: token, limit: pageSize, excludingDevice: nil)
                var saves: [(record: CloudRecord, save: RecordSave)] = []
                for record in batch.records where !record.deleted && !EncryptedCloud.isKeyRecord(record) {
                    looked += 1
                    let fields = cloud.sealedFields(record.recordType, ring)
                    guard !fields.isEmpty, try needsSealing(record, fields: fields, ring: ring, json: json) else { continue }
                    let opened = try cloud.opened(record, ring: ring, json: json,
                                                  acceptingClear: acceptingClear.map { $0[record.recordType] ?? [] } ?? fields)
                    guard opened.rejection == nil else {
                        report.unreadable += 1
                        continue
                    }
                    let plain = RecordSave(recordName: record.recordName, recordType: record.recordType,
                                           fields: opened.fields, expectedTag: record.changeTag)
                    saves.append((record, try cloud.sealed(plain, ring: ring, json: json)))
                }
                if !saves.isEmpty {
                    let outcomes = try cloud.base.save(zone: cloud.zone, saves.map(\.save), device: device, mark: nil,
                                                       schemaVersion: nil, atomic: false)
                    Failpoint.hit("reseal.after-save")
                    try db.transaction {
                        for (item, outcome) in zip(saves, outcomes) {
                            switch outcome {
                            case .saved(let tag, _):
                                report.resent += 1
                                try map.retag(name: item.record.recordName, from: item.record.changeTag, to: tag)
                            case .conflict, .notSaved:
                                conflicts += 1
                            }
                        }
                    }
                }
                progress(looked, report.resent)
                token = batch.token
                if !batch.moreComing { break }
            }
            report.changedMeanwhile = conflicts
            if conflicts == 0 {
                report.complete = true
                break
            }
        }
        return report
    }

    /// Whether one of `fields` of `record` is in clear or sealed with a key older than the current one.
    static func needsSealing(_ record: CloudRecord, fields: Set<String>, ring: ZoneKeyring, json: Connection) throws
        -> Bool
    {
        for field in fields {
            let path = EncryptedCloud.path(field)
            guard let row = try EncryptedCloud.row(json, "SELECT json_type(?1, ?2), json_extract(?1, ?3)",
                                                   [record.fields, path, path + ".\"$enc\""]),
                  let type = row[0].string
            else { continue }
            guard type == "object", let envelope = row[1].string else { return true }
            guard let generation = ZoneKeyring.generation(of: envelope) else { return true }
            if generation != ring.generation { return true }
        }
        return false
    }
}
