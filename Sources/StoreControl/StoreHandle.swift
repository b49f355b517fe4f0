import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One configured store, opened: the entry point of the storectl library.
///
///     let environment = ProcessInfo.processInfo.environment
///     let config = try ConfigLoader.load(path: "config.yaml", environment: environment)
///     let store = try StoreHandle(config: config, storeName: "notes", environment: environment)
///
/// The library never reads the process environment itself: what it needs of it (the tuning variables
/// `STORECTL_BATCH_SIZE` and `STORECTL_PAGE_SIZE`, the variables a config edit expands, `--secret-env`, `PGUSER`)
/// comes from `environment`, which the CLI fills from the environment it was started with.
public final class StoreHandle {
    /// The whole config the store came from.
    public let config: Config
    /// This store's settings.
    public let settings: StoreSettings
    /// The environment variables of the process that opened the store, as the CLI was started with them.
    public let environment: [String: String]
    private var connection: Connection?
    /// Open the store file read-only (`history`, `doctor`): a store the user may only read, or one on a read-only
    /// file system, can still be inspected. Set it before the first `database()`.
    public var readOnly = false
    /// The container `requireAvailableAccount()` opened and checked, for the `openMirror()` that follows it.
    var checkedCloud: (any CloudDatabase)?
    /// Where the store and its container stood after the last full sync round that left nothing to do
    /// (`StoreHandle+QuietRound`).
    var quietMark: QuietMark?
    /// The PostgreSQL container the last sync round used, with its open session and account check, for the next
    /// round (`storectl watch`): a round asks the server only what changed.
    var sessionCloud: PostgresCloudDatabase?
    /// The zone's key as the last round opened it, kept from round to round (`storectl watch`): a round reads the
    /// key record again, and derives a key from the passphrase only when the record changed.
    var zoneKeyring: ZoneKeyring?
    /// Whether this handle has asked the zone once whether it is encrypted (a store whose config encrypts nothing
    /// asks once; its import then meets a key made later in the change feed).
    var zoneKeyProbed = false
    /// The sealing layer `requireZoneKey()` opened over `checkedCloud`, for the `openMirror()` that follows it.
    var checkedSealed: EncryptedCloud?
    /// The schema version (`PRAGMA schema_version`) at which the history triggers were last found whole and current
    /// on this handle's connection: until the schema changes, a round does not compare every trigger again.
    var trackingCheckedAt: Int64?
    /// The tracked tables' maps as last read on this handle's connection, with the schema version, the tracked list
    /// and the store id (the maps' record-name prefix) they were read at: a round reads them again when any changed.
    var entityMapsRead: (schemaVersion: Int64, tracked: [String], storeID: String, maps: [EntityMap])?
    /// Where notes for the user go (a format upgrade, say); the CLI prints them on stderr.
    public var log: (String) -> Void = { _ in }

    /// Picks the store `storeName` (or the only one) from `config`. The file is opened on first use.
    /// - Throws: `StoreError` (exit 64) when the store name is unknown.
    public init(config: Config, storeName: String?, environment: [String: String]) throws {
        self.config = config
        self.settings = try config.store(named: storeName)
        self.environment = environment
    }

    /// Whether the store file exists.
    public var exists: Bool { FileManager.default.fileExists(atPath: settings.path) }

    /// The open connection to the store file, opened on first use.
    ///
    /// - Parameter create: create the file (and its folder) when missing; otherwise a missing file is exit 66.
    /// - Throws: `StoreError` or `SQLiteError`.
    public func database(create: Bool = false) throws -> Connection {
        if let connection { return connection }
        let path = settings.path
        if !FileManager.default.fileExists(atPath: path) {
            guard create, !readOnly else { throw missingStoreError() }
            let dir = Path.parent(path)
            do {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            } catch {
                throw StoreError(.cantCreate, "cannot create the folder \(dir) for store '\(settings.name)'",
                                 hint: "check the permissions of its parent folder")
            }
        }
        do {
            // WAL is switched on only for storectl's own stores: opening a file that turns out not to be one
            // must not rewrite its header.
            let mode: Connection.OpenMode = readOnly ? .readOnly : create ? .readWriteCreate : .readWrite
            let db = try Connection(path: path, mode: mode, wal: false)
            try checkNotTruncated(db, path: path)
            try refuseNewerFormat(db)
            if !readOnly, try create || db.tableExists("_storectl_meta") { try Self.enableWAL(db) }
            if !readOnly {
                try upgradeFormat(db)
            } else {
                try RecordMap.readOlderMap(db)
            }
            connection = db
            trackingCheckedAt = nil
            entityMapsRead = nil
            return db
        } catch let error as SQLiteError {
            if error.isNotADatabase {
                throw StoreError(.dataError, "store '\(settings.name)': \(path) is not a SQLite database (\(error.message))",
                                 hint: "check stores.\(settings.name).path in \(config.path); the file was not changed")
            }
            if error.isReadOnly || error.isCantOpen {
                throw StoreError(error.isReadOnly ? .noPermission : .cantCreate,
                                 "store '\(settings.name)': cannot open \(path) for writing (\(error.message))",
                                 hint: "check the permissions of the file and its folder")
            }
            throw error
        }
    }

    /// Refuses a store of a format newer than this storectl's before anything is written to it (its journal mode
    /// too): what it holds may mean something this storectl does not know.
    private func refuseNewerFormat(_ db: Connection) throws {
        let tracker = HistoryTracker(db: db, options: settings.trackingOptions)
        guard try tracker.isInitialized() else { return }
        let version = try tracker.formatVersion()
        guard version > StoreFormat.currentVersion else { return }
        throw StoreError(.dataError, "store '\(settings.name)': \(settings.path) has store format version \(version), "
                            + "this storectl knows version \(StoreFormat.version)",
                         hint: "upgrade storectl; the store was not changed")
    }

    /// Upgrades a store of an older format in place (a copy of it is saved first, beside it), and says so.
    private func upgradeFormat(_ db: Connection) throws {
        let tracker = HistoryTracker(db: db, options: settings.trackingOptions)
        guard try tracker.isInitialized(), try tracker.formatVersion() < StoreFormat.currentVersion else { return }
        var backup = settings.path + ".format\(try tracker.formatVersion()).bak"
        if FileManager.default.fileExists(atPath: backup) {
            backup = settings.path + ".format\(try tracker.formatVersion()).\(HistoryTracker.nowMilliseconds()).bak"
        }
        guard let report = try tracker.upgradeFormat(backupPath: backup, { from in
            try MirrorState.install(db)
            // Every table is compared once with its last synced record: values that older formats wrote with
            // too few digits, and changes of a value's type (before 3) or of its case or trailing spaces under a
            // column's collation (before 5) that their triggers did not record, go out.
            if from < 5 {
                try StoreMeta.removeAll(db, .columns)
                try StoreMeta.removeAll(db, .columnsCompared)
            }
            // Format 1 left no export marks in the container: the first sync compares the store's own records with
            // its record map once (a store restored from a copy is recognised that way too).
            if from < 2 { try StoreMeta.set(db, .ownRecordsUnchecked, "1") }
        }) else { return }
        log("store '\(settings.name)': upgraded \(settings.path) from store format \(report.from) to \(report.to); "
            + "the copy taken before is \(report.backup)")
    }

    /// Switches the store to write-ahead logging, so that readers and one writer work at the same time, and this
    /// connection to `synchronous=NORMAL`, which SQLite keeps per connection, not in the file: "WAL mode is always
    /// consistent with synchronous=NORMAL, but WAL mode does lose durability", a power loss can take back the last
    /// commits. storectl's commits hold sync state and imported rows, which a round finds again as after a crash
    /// (a save recorded in the cloud but not here, an import fetched again); with the default (FULL) every commit of
    /// a watcher's round waited for fsync.
    static func enableWAL(_ db: Connection) throws {
        if try db.scalar("PRAGMA journal_mode")?.string?.lowercased() != "wal" {
            _ = try db.scalar("PRAGMA journal_mode=WAL")
        }
        try db.execute("PRAGMA synchronous=NORMAL")
    }

    /// Refuses a file cut short: its header counts more pages than the file holds (and no WAL holds them).
    /// SQLite would only notice when it reads a missing page, possibly after writing to the file.
    private func checkNotTruncated(_ db: Connection, path: String) throws {
        // stat(2) rather than FileManager's attribute dictionary: this runs at the start of every command.
        func fileSize(_ p: String) -> Int64? {
            var info = stat()
            return stat(p, &info) == 0 ? Int64(info.st_size) : nil
        }
        guard fileSize(path + "-wal") ?? 0 == 0, let size = fileSize(path),
              let pages = try db.scalar("PRAGMA page_count")?.int64,
              let pageSize = try db.scalar("PRAGMA page_size")?.int64, pages * pageSize > size
        else { return }
        throw StoreError(.dataError, "store '\(settings.name)': \(path) is damaged: its header counts \(pages) page(s) "
                         + "of \(pageSize) bytes but the file holds only \(size) bytes",
                         hint: "restore the store from a backup; the file was not changed")
    }

    /// The error for a store file missing at its configured path: exit 66, naming the path and the fix
    /// (`missingStoreHint`).
    public func missingStoreError() -> StoreError {
        StoreError(.noInput, "store '\(settings.name)': \(settings.path) does not exist",
                   details: ["  stores.\(settings.name).path in \(config.path) names it; nothing was created or changed"],
                   hint: missingStoreHint)
    }

    /// What to do about a store file missing at its configured path. A store that was moved by hand is found again
    /// by pointing the config at it. A store in local mode in config.yaml may also never have been created (one
    /// just added with `store add`): `init` creates it, and the hint says so first. A store that config.yaml has
    /// in cloud mode was created and synced, so `init` is never suggested for it: a new, empty store in its place
    /// would make its rows look deleted to every other device.
    public var missingStoreHint: String {
        let moved = "point the config at its new place: 'storectl config set stores.\(settings.name).path NEW_PATH' "
            + "(next time, 'storectl migrate --to NEW_PATH' moves the file and the config together)"
        guard settings.mode == .local else { return "if the file was moved, " + moved }
        return "if the store is new (just added to the config, by store add say, and never created), create it "
            + "with 'storectl init'; if the file was moved, " + moved
    }

    /// Throws `missingStoreError()` when the store file is not at its configured path.
    public func requireExists() throws {
        if !exists { throw missingStoreError() }
    }

    /// Closes the connection; the next `database()` opens it again.
    public func close() {
        connection = nil
        trackingCheckedAt = nil
        entityMapsRead = nil
        checkedCloud = nil
        quietMark = nil
        sessionCloud = nil
    }
}
