import FoundationEssentials
import StoreBase

/// The account states a cloud reports, named as CloudKit's `CKAccountStatus` names them.
public enum AccountStatus: String, Sendable, Codable, CaseIterable {
    case available
    case noAccount
    case restricted
    case couldNotDetermine
    case temporarilyUnavailable

    /// 0 for `available`, 75 for `temporarilyUnavailable`, 69 for the rest.
    public var exitCode: ExitCode {
        switch self {
        case .available: return .ok
        case .temporarilyUnavailable: return .tempFail
        case .noAccount, .restricted, .couldNotDetermine: return .unavailable
        }
    }
}

/// An account status with the reason for it, in words a user can act on. Never contains a secret.
public struct AccountStatusReport: Sendable, Codable, Equatable {
    public var status: AccountStatus
    public var reason: String
    /// The account id that was checked, if one was configured.
    public var account: String?
    /// Who owns the container, when the backend can tell: on PostgreSQL the role that owns its schema.
    public var owner: String?
    /// Whether the check found no container at all (no container file, no PostgreSQL schema), whatever the status
    /// says about creating one. A store bound to a container takes this as the container gone, never as one to
    /// create. Not part of the JSON form.
    public var containerMissing: Bool

    enum CodingKeys: String, CodingKey {
        case status, reason, account, owner
    }

    public init(status: AccountStatus, reason: String, account: String?, owner: String? = nil,
                containerMissing: Bool = false)
    {
        self.status = status
        self.reason = reason
        self.account = account
        self.owner = owner
        self.containerMissing = containerMissing
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        status = try c.decode(AccountStatus.self, forKey: .status)
        reason = try c.decode(String.self, forKey: .reason)
        account = try c.decodeIfPresent(String.self, forKey: .account)
        owner = try c.decodeIfPresent(String.self, forKey: .owner)
        containerMissing = false
    }
}

/// A record in a cloud zone: the latest state of one row, or its tombstone.
public struct CloudRecord: Sendable, Equatable {
    public var zone: String
    /// The record's name: stable across devices, unique in its zone.
    public var recordName: String
    /// The entity (table) the record mirrors.
    public var recordType: String
    /// The fields as a JSON object text, e.g. `{"title":"hi","note_id":{"$ref":"..."}}`. Empty object for tombstones.
    public var fields: String
    /// Changes on every save. A save must name the tag it expects to replace.
    public var changeTag: String
    /// The zone-wide sequence number of the record's latest save. Fetching after a token returns records by seq.
    public var seq: Int64
    /// Whether this is a tombstone.
    public var deleted: Bool
    /// The device (store id) that saved it last.
    public var modifiedBy: String
    /// When it was saved last, in seconds since 1970.
    public var modifiedAt: Double
    /// Why the record must not be applied, set by a backend that can tell: its last save came from a device of an
    /// account that may not write the zone (a record forged into a container file). The import sets it aside.
    public var rejection: String? = nil
    /// What to do about the `rejection`, when the code that set it knows better than the account check's hint.
    public var rejectionHint: String? = nil

    public init(zone: String, recordName: String, recordType: String, fields: String, changeTag: String, seq: Int64,
                deleted: Bool, modifiedBy: String, modifiedAt: Double)
    {
        self.zone = zone
        self.recordName = recordName
        self.recordType = recordType
        self.fields = fields
        self.changeTag = changeTag
        self.seq = seq
        self.deleted = deleted
        self.modifiedBy = modifiedBy
        self.modifiedAt = modifiedAt
    }
}

/// One record to save: a new state, or a deletion.
public struct RecordSave: Sendable, Equatable {
    /// What a tombstone's fields are stored as: `{}`, unless they are an alias (`{"$alias": "NAME"}`: the record was
    /// merged into NAME as a duplicate) or the orphan rule's mark (`orphanTombstone`), which every backend keeps as
    /// they are.
    ///
    /// The alias is kept only when the fields are exactly that object, one string member: a record name may hold
    /// any character (a natural key's name holds commas and quotes, `tag_props:["tags/1","color"]`), so the test is
    /// a JSON decoding, not a look at the text.
    public static func tombstoneFields(_ fields: String) -> String {
        if fields == orphanTombstone { return fields }
        guard fields.hasPrefix("{\"$alias\":"),
              let object = try? JSONDecoder().decode([String: String].self, from: Data(fields.utf8)),
              object.count == 1, let target = object["$alias"], !target.isEmpty
        else { return "{}" }
        return fields
    }

    public var recordName: String
    public var recordType: String
    /// The fields of the tombstone of a row deleted by the orphan rule (its parent was deleted), not by a user.
    public static let orphanTombstone = #"{"$orphan":true}"#

    /// JSON object text. A deletion's fields are stored as `{}`, unless they say where a merged record went:
    /// `{"$alias": "NAME"}` (a duplicate merged into NAME) is kept, or that the row went with its parent by the
    /// orphan rule (`orphanTombstone`, exactly).
    public var fields: String
    public var deleted: Bool
    /// The change tag the saver last saw; nil when it believes the record does not exist yet.
    public var expectedTag: String?

    public init(recordName: String, recordType: String, fields: String, deleted: Bool = false,
                expectedTag: String?)
    {
        self.recordName = recordName
        self.recordType = recordType
        self.fields = fields
        self.deleted = deleted
        self.expectedTag = expectedTag
    }
}

/// What happened to one record of a batch save.
public enum SaveOutcome: Sendable, Equatable {
    /// Saved; the record now has this tag and seq.
    case saved(changeTag: String, seq: Int64)
    /// Not saved, because the expected tag did not match. `server` is the record as the server has it
    /// (a tombstone included), or nil when the saver expected a tag and the record does not exist at all.
    case conflict(server: CloudRecord?)
    /// Not saved, although its expected tag matched: another record of an atomic batch met a conflict, and nothing
    /// of the batch was written.
    case notSaved
}

/// Where a device's export stood when it saved a batch. The container keeps the latest marks of each device per
/// zone, in the same commit as the batch's records, so that:
/// - after a crash between a save and the store's own record of it, the store finds the records it saved but did
///   not record, and knows which of its local changes are newer than each of them (`historySeq`);
/// - a store file replaced by an older copy of itself (a restored backup) sees that the container holds a later
///   export of its own (`serial`) and takes those records back instead of skipping them as its own echoes.
public struct ExportMark: Sendable, Equatable, Codable {
    /// Goes up by one with every export the store starts; the store commits it before it saves anything.
    public var serial: Int64
    /// The store's newest history seq when the batch's rows were read: a local change after it is newer than the
    /// batch.
    public var historySeq: Int64
    /// The store's clock when the batch's rows were read, in milliseconds since 1970.
    public var time: Int64

    public init(serial: Int64, historySeq: Int64, time: Int64) {
        self.serial = serial
        self.historySeq = historySeq
        self.time = time
    }
}

/// What a container knows of one device's saves in a zone.
public struct DeviceExportState: Sendable, Equatable {
    /// The mark of the device's latest batch.
    public var mark: ExportMark
    /// The seq of the last record that batch saved.
    public var lastSeq: Int64

    public init(mark: ExportMark, lastSeq: Int64) {
        self.mark = mark
        self.lastSeq = lastSeq
    }
}

/// One of a device's own records, with the history position of the batch that saved it (nil when the container
/// no longer knows it).
public struct DeviceRecord: Sendable, Equatable {
    public var record: CloudRecord
    public var historySeq: Int64?
    /// The device saved this version, and another device's save has replaced it since: the record's current
    /// version is built on it (a save replaces only the version its saver had read). The container keeps such a
    /// version while the mark of the batch that saved it is kept, so that a store killed before it recorded its
    /// save learns that the save landed, and does not send it again as if it were an edit made beside the newer one.
    public var superseded: Bool

    public init(record: CloudRecord, historySeq: Int64?, superseded: Bool = false) {
        self.record = record
        self.historySeq = historySeq
        self.superseded = superseded
    }
}

/// Where a reader of a zone's changes has got to. Opaque to callers: store and pass back `rawValue`.
///
/// A token belongs to one generation of a zone: after a purge the zone gets a new epoch and older tokens are
/// refused with `CloudError.zoneReset`, so that a purge elsewhere never looks like "everything was deleted".
public struct ServerChangeToken: Sendable, Equatable, Codable, CustomStringConvertible {
    public var epoch: String
    public var seq: Int64

    public init(epoch: String, seq: Int64) {
        self.epoch = epoch
        self.seq = seq
    }

    /// Parses `epoch:seq`.
    public init?(rawValue: String) {
        guard let colon = rawValue.lastIndex(of: ":"), let seq = Int64(rawValue[rawValue.index(after: colon)...])
        else { return nil }
        self.epoch = String(rawValue[..<colon])
        self.seq = seq
    }

    public var rawValue: String { "\(epoch):\(seq)" }
    public var description: String { rawValue }
}

/// One page of changes.
public struct ChangeBatch: Sendable, Equatable {
    /// Each changed record's latest state, tombstones included, in seq order. A record appears at most once.
    public var records: [CloudRecord]
    /// The token to fetch after next time.
    public var token: ServerChangeToken
    /// Whether more changes are waiting after `token`.
    public var moreComing: Bool
    /// The zone's schema version as the page's own snapshot saw it, when the backend reads it with the page (one
    /// statement instead of two): a record saved after a raise is never seen without the raise.
    public var schemaVersion: SchemaVersionRead = .notRead

    public init(records: [CloudRecord], token: ServerChangeToken, moreComing: Bool) {
        self.records = records
        self.token = token
        self.moreComing = moreComing
    }
}

/// A zone and its state.
public struct ZoneInfo: Sendable, Equatable, Codable {
    public var name: String
    /// Changes when the zone is purged and created again.
    public var epoch: String
    /// The highest seq saved in the zone so far.
    public var lastSeq: Int64
    /// How many live (not deleted) records the zone holds.
    public var liveRecords: Int64
    /// The account that owns the zone (created it), when the backend knows shares.
    public var owner: String? = nil
    /// What this connection's account may do in the zone, when the backend knows shares; nil reads as `.owner`.
    /// `zoneInfo` throws `.permission` rather than return a zone the account has no share of.
    public var access: ZoneAccess.Level? = nil
    /// The zone's schema version, when the backend reads it with the zone (one statement instead of two).
    public var schemaVersion: SchemaVersionRead = .notRead
    /// The export state of the device that asked (`roundZoneInfo`), when the backend reads it with the zone.
    public var exportState: ReadAlong<DeviceExportState> = .notRead

    private enum CodingKeys: String, CodingKey { case name, epoch, lastSeq, liveRecords, owner, access }

    public init(name: String, epoch: String, lastSeq: Int64, liveRecords: Int64) {
        self.name = name
        self.epoch = epoch
        self.lastSeq = lastSeq
        self.liveRecords = liveRecords
    }
}

/// A marker: a named flag in a zone, created atomically once (e.g. "this seed ran").
public struct Marker: Sendable, Equatable, Codable {
    public var zone: String
    public var name: String
    /// The device that created it.
    public var createdBy: String
    public var createdAt: Double
    public var payload: String

    public init(zone: String, name: String, createdBy: String, createdAt: Double, payload: String) {
        self.zone = zone
        self.name = name
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.payload = payload
    }
}

/// The schema version a zone's records are written at: raised by the first store that runs `storectl migrate
/// --sql FILE --schema-version N` and syncs, so that a data migration is applied once per zone, not once per device.
/// Kept as a marker of the zone (`CloudContract.schemaMarkerName`), so a purge resets it with the records.
/// A value read along with something else in the same statement (`ZoneInfo`, `ChangeBatch`), or not read there:
/// then the backend's own call for it is made.
public enum ReadAlong<Value: Sendable & Equatable>: Sendable, Equatable {
    case notRead
    /// Read: nil when there is none.
    case read(Value?)
}

/// A zone's schema version read along (`.read(nil)`: no data migration ever raised the zone, version 0); else
/// `CloudDatabase.schemaVersion(zone:)` is asked.
public typealias SchemaVersionRead = ReadAlong<ZoneSchemaVersion>

public struct ZoneSchemaVersion: Sendable, Equatable, Codable {
    /// The version the zone's records are written at now.
    public var version: Int
    /// SHA-256 of the migration file that brought the zone there, as the device that raised it ran it.
    public var sha256: String
    /// That file's path as that device named it: a hint for the other devices, which run the same file.
    public var file: String
    /// The device (store id) that raised it, and when (filled from the marker; not part of its payload).
    public var device: String
    public var at: Double

    public init(version: Int, sha256: String, file: String, device: String = "", at: Double = 0) {
        self.version = version
        self.sha256 = sha256
        self.file = file
        self.device = device
        self.at = at
    }

    enum CodingKeys: String, CodingKey {
        case version, sha256, file
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        version = try c.decode(Int.self, forKey: .version)
        sha256 = try c.decodeIfPresent(String.self, forKey: .sha256) ?? ""
        file = try c.decodeIfPresent(String.self, forKey: .file) ?? ""
        device = ""
        at = 0
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(version, forKey: .version)
        try c.encode(sha256, forKey: .sha256)
        try c.encode(file, forKey: .file)
    }
}

/// What `raiseSchemaVersion` did.
public enum SchemaRaise: Sendable, Equatable {
    /// The zone is now at the version asked for.
    case raised(ZoneSchemaVersion)
    /// The zone was at that version or a later one already (another device migrated first): nothing was written.
    case alreadyAt(ZoneSchemaVersion)
    /// Other devices saved this many records after the seq the caller has seen: they were written at the old
    /// version and the caller's migration never transformed them, so the zone stays where it is.
    case unseenChanges(Int64)
}

/// A device (a store, by its store id) that has talked to the container.
public struct DeviceInfo: Sendable, Equatable, Codable {
    public var storeID: String
    public var name: String
    public var account: String?
    public var firstSeen: Double
    public var lastSeen: Double

    public init(storeID: String, name: String, account: String?, firstSeen: Double, lastSeen: Double) {
        self.storeID = storeID
        self.name = name
        self.account = account
        self.firstSeen = firstSeen
        self.lastSeen = lastSeen
    }
}

/// A file-backend or PostgreSQL account, as `account list` shows it. Never holds a secret or its hash.
public struct AccountInfo: Sendable, Equatable, Codable {
    public var id: String
    public var role: String
    public var disabled: Bool
    public var createdAt: Double

    public init(id: String, role: String, disabled: Bool, createdAt: Double) {
        self.id = id
        self.role = role
        self.disabled = disabled
        self.createdAt = createdAt
    }
}

/// A cloud container: zones of records with change tags, a change feed, markers, accounts and devices.
///
/// This is the one protocol every backend implements (the SQLite container file and PostgreSQL), and one
/// conformance suite proves each of them. A connection is not Sendable: it has one owner at a time.
///
/// The guarantees:
/// - `fetchChanges` returns, after a token, every record saved after it, in seq order, each once, at its latest
///   state, tombstones included; seq order is commit order, so concurrent savers never make a reader skip one.
/// - `save` is conditional per record on its expected change tag; a mismatch is a `.conflict` with the server's
///   record, and the other records of the batch are still saved.
/// - `createMarker` is atomic: of concurrent creators exactly one gets `created == true`.
/// - Every call but `accountStatus()` first checks the connection's account (registered, secret matching, not
///   disabled; once per connection) and throws `CloudError(.account)` otherwise. A write to a container this user
///   may not write throws `.permission`; one blocked by a lock beyond the busy timeout throws `.temporary`.
/// - `save`, `createMarker` and `purgeZone` need the zone (`ensureZone` first), else `.zoneNotFound`.
/// - A conflict's server record carries `modifiedBy`: after a crash, a device recognises its own earlier write
///   (same device, same fields) and treats the save as done.
/// - A purge keeps the seq counting up and changes the epoch; tokens of the old epoch get `.zoneReset`.
/// - When no more changes are waiting, the returned token is at the zone's last seq, so it moves past records
///   that were saved again later.
public protocol CloudDatabase: AnyObject {
    /// The container id, e.g. `iCloud.com.example.notes`.
    var container: String { get }

    /// Where the container is, with any password removed, for messages.
    var displayURL: String { get }

    /// The status of the account this connection was opened with, and why.
    func accountStatus() -> AccountStatusReport

    /// The zone, or nil when it does not exist. Without `countLive`, `liveRecords` is not counted (it is -1):
    /// counting is O(records), the epoch and last seq are not.
    /// - Throws: `CloudError`.
    func zoneInfo(_ zone: String, countLive: Bool) throws -> ZoneInfo?

    /// The zone as a sync round starts with it (`zoneInfo` without the live count), with, where the backend reads
    /// them in the same statement, the zone's schema version and `device`'s export state (`ReadAlong`).
    /// - Throws: `CloudError`.
    func roundZoneInfo(_ zone: String, device: String) throws -> ZoneInfo?

    /// Creates the zone if it is missing, and returns it.
    /// - Throws: `CloudError`.
    @discardableResult
    func ensureZone(_ zone: String) throws -> ZoneInfo

    /// The changes saved after `token` (from the beginning when nil), at most `limit` records.
    ///
    /// With `excludingDevice`, records whose latest save came from that device are left out (a device already
    /// holds its own writes); the token still moves past them.
    /// - Throws: `CloudError.zoneNotFound`, or `CloudError.zoneReset` when the token is from an older epoch.
    func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int, excludingDevice: String?) throws
        -> ChangeBatch

    /// Whether `fetchChanges` may run on a thread of its own while the caller works on its store (the import
    /// fetches the next page while it applies one). False for a wrapper that reads the caller's own connection.
    var fetchesConcurrently: Bool { get }

    /// The current state of one record, or nil.
    /// - Throws: `CloudError`.
    func fetchRecord(zone: String, recordName: String) throws -> CloudRecord?

    /// Saves a batch of records, each conditional on its expected tag, atomically as one commit. Returns one
    /// outcome per save, in order. With `mark`, when the batch saved at least one record, the container records
    /// the mark with the seq of the batch's last saved record, in the same commit, and forgets the device's marks
    /// of older serials in the zone.
    /// - Throws: `CloudError` when the batch could not be attempted at all (nothing was saved then).
    ///
    /// With `schemaVersion`, the batch is refused whole (`CloudError(.schemaAhead)`, nothing saved) when the zone's
    /// schema version is above it: a device that has not run the zone's data migration never writes values of the
    /// old shape over the new ones. The check is made under the zone's write lock, so it cannot race a raise.
    ///
    /// With `atomic`, the batch is saved whole or not at all (CloudKit's atomic `CKModifyRecordsOperation`): when a
    /// record meets a conflict, nothing of the batch is written (no record, no seq, no mark), the conflicting
    /// records come back as `.conflict` and the others as `.notSaved`.
    func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?,
              atomic: Bool) throws -> [SaveOutcome]

    /// The zone's schema version, or nil when no data migration ever raised it (version 0).
    /// - Throws: `CloudError` (`.zoneNotFound` when the zone does not exist).
    func schemaVersion(zone: String) throws -> ZoneSchemaVersion?

    /// Raises the zone's schema version to `target.version`, atomically under the zone's write lock, when no other
    /// device saved a record after `seenUpTo` (the caller has every record of the old version it transformed).
    /// - Throws: `CloudError` (`.zoneNotFound`, `.permission`).
    func raiseSchemaVersion(zone: String, to target: ZoneSchemaVersion, device: String, seenUpTo: Int64) throws
        -> SchemaRaise

    /// The device's latest export mark in the zone, or nil when it never saved there with one.
    /// - Throws: `CloudError`.
    func exportState(zone: String, device: String) throws -> DeviceExportState?

    /// The records whose latest save came from `device`, with seq after `seq`, in seq order, at most `limit`; each
    /// with the history seq of the mark of the batch that saved it. Among them, marked `superseded`, the device's
    /// saves that another device's save has replaced since, while the marks of their batches are kept (the
    /// device has not started an export of a later serial). `moreComing` when more are waiting.
    /// - Throws: `CloudError.zoneNotFound`.
    func fetchDeviceRecords(zone: String, device: String, after seq: Int64, limit: Int) throws
        -> (records: [DeviceRecord], moreComing: Bool)

    /// Creates the marker if it is absent. Returns whether this call created it, and the marker as stored.
    /// - Throws: `CloudError`.
    func createMarker(zone: String, name: String, device: String, payload: String) throws
        -> (created: Bool, marker: Marker)

    /// The marker, or nil.
    /// - Throws: `CloudError`.
    func marker(zone: String, name: String) throws -> Marker?

    /// Deletes every record and marker of the zone and gives it a new epoch.
    /// - Throws: `CloudError`.
    func purgeZone(_ zone: String) throws

    /// Records that `storeID` talked to the container now.
    /// - Throws: `CloudError`.
    func registerDevice(storeID: String, name: String) throws

    /// The devices that have talked to the container, with when each was last seen.
    /// - Throws: `CloudError`.
    func devices() throws -> [DeviceInfo]

    /// What a sync round with nothing to do depends on in the container, read cheaply on this connection: nil
    /// unless the configured account is available by this very read. A round that finds the same state as the
    /// last full round, with nothing changed in the store either, has nothing to do (`StoreHandle.sync`).
    /// `known` is a state this backend returned before, whose checks passed: a read that gives the same digest
    /// need not check again. The default is nil: every round is then a full one.
    /// - Throws: `CloudError` met while reading.
    func quietState(zone: String, known: QuietState?) throws -> QuietState?

    /// The quiet state a full round's import left, without asking the server: the zone at `token` (the server
    /// token the import recorded, read in the round) with the checks of a session that still stands. Nil (the
    /// default) when the backend must read it (`quietState(zone:known:)`).
    func quietState(zone: String, importedUpTo token: ServerChangeToken) -> QuietState?

    /// What the backend worked around since the last call, for the user to hear of (a read replica that could not
    /// be reached, or is not a replica), each once; the list is emptied. The default is none.
    func takeWarnings() -> [String]

    /// How a read replica served the change feed since the last call (the counts restart); nil without one. The
    /// default is nil.
    func takeReplicaUse() -> ReplicaUse?
}

/// How a read replica (a PostgreSQL hot standby, `cloud.replica_url`) served the change feed.
public struct ReplicaUse: Sendable, Equatable, Codable {
    /// Pages of changes read on the replica.
    public var pages = 0
    /// Pages read on the primary because the replica had not replayed what the primary already showed.
    public var behind = 0
    /// Pages read on the primary because the replica could not be reached or is not a replica.
    public var unavailable = 0

    public init(pages: Int = 0, behind: Int = 0, unavailable: Int = 0) {
        self.pages = pages
        self.behind = behind
        self.unavailable = unavailable
    }
}

/// The state of a container as a sync round with nothing to do sees it: a digest of the container's identity,
/// format and the configured account's registration, and where the zone stands.
public struct QuietState: Sendable, Equatable {
    /// What the round's account and container checks read, as bytes to compare: a SHA-256 digest where that
    /// covers a secret's stored hash. Never printed.
    public var digest: [UInt8]
    /// The zone's epoch and last seq, or nil when the zone does not exist.
    public var zone: ServerChangeToken?

    public init(digest: [UInt8], zone: ServerChangeToken?) {
        self.digest = digest
        self.zone = zone
    }
}

extension CloudDatabase {
    public var fetchesConcurrently: Bool { true }

    public func roundZoneInfo(_ zone: String, device: String) throws -> ZoneInfo? {
        try zoneInfo(zone, countLive: false)
    }

    public func quietState(zone: String, known: QuietState?) throws -> QuietState? { nil }

    public func quietState(zone: String, importedUpTo token: ServerChangeToken) -> QuietState? { nil }

    public func takeWarnings() -> [String] { [] }

    public func takeReplicaUse() -> ReplicaUse? { nil }

    /// The zone with its live record count, or nil when it does not exist.
    /// - Throws: `CloudError`.
    public func zoneInfo(_ zone: String) throws -> ZoneInfo? {
        try zoneInfo(zone, countLive: true)
    }

    /// Saves a batch, each record on its own (not atomic).
    /// - Throws: see `save(zone:_:device:mark:schemaVersion:atomic:)`.
    public func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?)
        throws -> [SaveOutcome]
    {
        try save(zone: zone, saves, device: device, mark: mark, schemaVersion: schemaVersion, atomic: false)
    }

    /// Saves a batch without an export mark.
    /// - Throws: see `save(zone:_:device:mark:)`.
    public func save(zone: String, _ saves: [RecordSave], device: String) throws -> [SaveOutcome] {
        try save(zone: zone, saves, device: device, mark: nil, schemaVersion: nil)
    }

    /// Saves a batch without a schema version check.
    /// - Throws: see `save(zone:_:device:mark:schemaVersion:)`.
    public func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?) throws
        -> [SaveOutcome]
    {
        try save(zone: zone, saves, device: device, mark: mark, schemaVersion: nil)
    }

    /// Every change after `token`, at most `limit` records.
    /// - Throws: see `fetchChanges(zone:since:limit:excludingDevice:)`.
    public func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int) throws -> ChangeBatch {
        try fetchChanges(zone: zone, since: token, limit: limit, excludingDevice: nil)
    }
}

/// An error from a cloud backend.
public struct CloudError: DiagnosedError, Equatable {
    public enum Kind: String, Sendable, Equatable {
        /// The container does not exist (run `storectl cloud init`).
        case containerMissing
        /// The file or schema is not a storectl container, or is damaged.
        case notAContainer
        /// The zone does not exist.
        case zoneNotFound
        /// The zone was purged or recreated since the token was issued.
        case zoneReset
        /// The account is not available.
        case account
        /// A lock was held beyond the timeout, the connection dropped, or the server is starting: retry.
        case temporary
        /// The backend refused for lack of privileges.
        case permission
        /// The container's storage failed: its file system is full, reported an I/O error, or its file is damaged.
        case io
        /// The request was malformed.
        case invalid
        /// The zone's schema version is above the writer's: it must run the zone's data migration first.
        case schemaAhead
        /// An account named in a request (a share's participant) is not registered in the container.
        case unknownAccount
        /// Anything else.
        case other
    }

    public var kind: Kind
    public var summary: String
    public var hint: String?

    public init(_ kind: Kind, _ summary: String, hint: String? = nil) {
        self.kind = kind
        self.summary = summary
        self.hint = hint
    }

    public var exitCode: ExitCode {
        switch kind {
        case .containerMissing, .account: return .unavailable
        case .notAContainer, .invalid, .zoneReset: return .dataError
        case .zoneNotFound: return .unavailable
        case .temporary, .schemaAhead: return .tempFail
        case .permission: return .noPermission
        case .unknownAccount: return .noUser
        case .io: return .ioError
        case .other: return .software
        }
    }
}
