import Foundation
import StoreCloud
import StoreSQLite
import XCTest

/// A cloud that fails the test when storectl calls it while the store's write transaction is open: an app's
/// write would wait on that round trip. Every call made on the thread that owns the store connection reads the
/// connection's transaction state first (`Connection.holdsWriteTransaction`, `sqlite3_txn_state`). The import's
/// fetches run on that thread here (`fetchesConcurrently` is false), so a fetch the import's transaction waited
/// for is seen. The export's saves run on a thread of their own beside the store's work, and the transactions
/// that record them never wait for one: they are not checked (the connection is never read from another
/// thread).
final class TransactionGuardCloud: CloudDatabase {
    let base: any CloudDatabase
    let store: Connection
    private let owner = Thread.current
    /// What to do on a call made inside the write transaction (by default, fail the test).
    let onViolation: (String) -> Void
    /// Every call, by name, and those made inside the write transaction.
    private(set) var calls: [String] = []
    private(set) var violations: [String] = []
    /// Runs at every call, after the check (a test's app writing to the store while storectl fetches).
    var whileCalling: ((String) throws -> Void)?

    init(_ base: any CloudDatabase, store: Connection, onViolation: @escaping (String) -> Void = {
        XCTFail("a cloud call inside the store's write transaction: \($0)")
    }) {
        self.base = base
        self.store = store
        self.onViolation = onViolation
    }

    private func check(_ call: String) throws {
        guard Thread.current == owner else { return }
        calls.append(call)
        if store.holdsWriteTransaction {
            violations.append(call)
            onViolation(call)
        }
        try whileCalling?(call)
    }

    var container: String { base.container }
    var displayURL: String { base.displayURL }
    var fetchesConcurrently: Bool { false }

    func accountStatus() -> AccountStatusReport { base.accountStatus() }

    func zoneInfo(_ zone: String, countLive: Bool) throws -> ZoneInfo? {
        try check("zoneInfo")
        return try base.zoneInfo(zone, countLive: countLive)
    }

    func roundZoneInfo(_ zone: String, device: String) throws -> ZoneInfo? {
        try check("zoneInfo")
        return try base.roundZoneInfo(zone, device: device)
    }

    func ensureZone(_ zone: String) throws -> ZoneInfo {
        try check("ensureZone")
        return try base.ensureZone(zone)
    }

    func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int, excludingDevice: String?) throws
        -> ChangeBatch
    {
        try check("fetchChanges")
        return try base.fetchChanges(zone: zone, since: token, limit: limit, excludingDevice: excludingDevice)
    }

    func fetchRecord(zone: String, recordName: String) throws -> CloudRecord? {
        try check("fetchRecord")
        return try base.fetchRecord(zone: zone, recordName: recordName)
    }

    func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?,
              atomic: Bool) throws
        -> [SaveOutcome]
    {
        try check("save")
        return try base.save(zone: zone, saves, device: device, mark: mark, schemaVersion: schemaVersion, atomic: atomic)
    }

    func schemaVersion(zone: String) throws -> ZoneSchemaVersion? {
        try check("schemaVersion")
        return try base.schemaVersion(zone: zone)
    }

    func raiseSchemaVersion(zone: String, to target: ZoneSchemaVersion, device: String, seenUpTo: Int64) throws
        -> SchemaRaise
    {
        try check("raiseSchemaVersion")
        return try base.raiseSchemaVersion(zone: zone, to: target, device: device, seenUpTo: seenUpTo)
    }

    func exportState(zone: String, device: String) throws -> DeviceExportState? {
        try check("exportState")
        return try base.exportState(zone: zone, device: device)
    }

    func fetchDeviceRecords(zone: String, device: String, after seq: Int64, limit: Int) throws
        -> (records: [DeviceRecord], moreComing: Bool)
    {
        try check("fetchDeviceRecords")
        return try base.fetchDeviceRecords(zone: zone, device: device, after: seq, limit: limit)
    }

    func createMarker(zone: String, name: String, device: String, payload: String) throws
        -> (created: Bool, marker: Marker)
    {
        try check("createMarker")
        return try base.createMarker(zone: zone, name: name, device: device, payload: payload)
    }

    func marker(zone: String, name: String) throws -> Marker? {
        try check("marker")
        return try base.marker(zone: zone, name: name)
    }

    func purgeZone(_ zone: String) throws {
        try check("purgeZone")
        try base.purgeZone(zone)
    }

    func registerDevice(storeID: String, name: String) throws {
        try check("registerDevice")
        try base.registerDevice(storeID: storeID, name: name)
    }

    func devices() throws -> [DeviceInfo] {
        try check("devices")
        return try base.devices()
    }

    func quietState(zone: String, known: QuietState?) throws -> QuietState? {
        try check("quietState")
        return try base.quietState(zone: zone, known: known)
    }
}
