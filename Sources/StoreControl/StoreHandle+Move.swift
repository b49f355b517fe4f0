import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite

/// What `storectl migrate --to` did. The JSON form is stable.
public struct MoveReport: Sendable, Codable, Equatable {
    public var store: String
    /// `move` or `copy`.
    public var action: String
    /// The store file before.
    public var from: String
    /// The new file.
    public var to: String
    /// The store id of the new file: the same as before for a move, a new one for a copy.
    public var storeID: String?
    /// `kept` (a move) or `new` (a copy).
    public var identity: String
    /// Pages copied by the backup.
    public var pages: Int
    /// `PRAGMA integrity_check` of the new file.
    public var integrity: String
    /// The value now written in `stores.NAME.path`, or nil when config.yaml was not changed (a copy).
    public var configPath: String?
    /// Whether the old file was removed (a move, after the new one passed its check).
    public var oldFileRemoved: Bool
    /// What was done, in order.
    public var steps: [PlanStep]

    enum CodingKeys: String, CodingKey {
        case store, action, from, to, identity, pages, integrity, steps
        case storeID = "store_id"
        case configPath = "config_path"
        case oldFileRemoved = "old_file_removed"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(store, forKey: .store)
        try c.encode(action, forKey: .action)
        try c.encode(from, forKey: .from)
        try c.encode(to, forKey: .to)
        try c.encode(storeID, forKey: .storeID)
        try c.encode(identity, forKey: .identity)
        try c.encode(pages, forKey: .pages)
        try c.encode(integrity, forKey: .integrity)
        try c.encode(configPath, forKey: .configPath)
        try c.encode(oldFileRemoved, forKey: .oldFileRemoved)
        try c.encode(steps, forKey: .steps)
    }
}

extension StoreHandle {
    /// `storectl migrate --to TARGET [--copy]`: moves (or copies) the store file to `target` with SQLite's online
    /// backup API. History, tokens, consumers, the record map and meta come along.
    ///
    /// A move keeps the store's identity. Writers are held off (the write lock) while the copy is taken, so nothing
    /// written to the old file is left behind; the copy must pass `PRAGMA integrity_check` and hold as many rows in
    /// every table as the old file before it is renamed into place; then `stores.NAME.path` in config.yaml names it
    /// (comments kept); then the old file is fenced (a writer that still has it open gets an error naming the new
    /// path, rather than writing into a file about to disappear) and removed. A copy gets a new identity and leaves
    /// the old file and config.yaml as they were.
    ///
    /// Killed at any step before the config edit, the old setup is untouched (an unfinished copy is left under a
    /// temporary name, or at `target` with the old store id, and is replaced by the next run); killed after it, the
    /// new setup works and running the same command again removes the old file.
    /// - Parameter target: an absolute path.
    /// - Throws: `StoreError`: 66 when the store is missing, 64 for a target that is the store or another store,
    ///   73 when the target exists or cannot be created, 75 when the write lock or the config moved under it;
    ///   `SQLiteError`.
    public func move(to target: String, copy: Bool, log: (String) -> Void = { _ in },
                     progress: (_ done: Int, _ total: Int) -> Void = { _, _ in }) throws -> MoveReport
    {
        let target = Path.standardized(target, home: environment["HOME"])
        let source = Path.standardized(settings.path)
        var steps: [PlanStep] = []
        func step(_ name: String, _ detail: String) {
            steps.append(PlanStep(step: name, detail: detail))
            log("\(name): \(detail)")
        }
        var report = MoveReport(store: settings.name, action: copy ? "copy" : "move", from: source, to: target,
                                storeID: nil, identity: copy ? "new" : "kept", pages: 0, integrity: "",
                                configPath: nil, oldFileRemoved: false, steps: [])
        if target == source {
            guard !copy else {
                throw StoreError(.usage, "cannot copy store '\(settings.name)' onto itself (\(target))",
                                 hint: "name another path: 'storectl migrate --to NEW_PATH --copy'")
            }
            try requireExists()
            // The config names the target already: an earlier move stopped after its config edit.
            let db = try database()
            report.storeID = try MirrorState.meta(db, .storeID)
            report.configPath = configValue(forPath: target)
            report.integrity = "not checked"
            if let old = try MirrorState.meta(db, .movedFrom) {
                close()
                report.oldFileRemoved = try removeMovedFrom(old, to: target, step: step)
            }
            if !report.oldFileRemoved { step("move", "store '\(settings.name)' is already at \(target); nothing to do") }
            report.steps = steps
            return report
        }
        try requireExists()
        if let other = config.stores.first(where: { $0.name != settings.name && Path.standardized($0.path) == target }) {
            throw StoreError(.usage, "\(target) is the file of store '\(other.name)' in \(config.path)",
                             hint: "name a path no store uses")
        }
        let folder = Path.parent(target)
        let sourceID = try MirrorState.meta(try database(), .storeID)
        close()
        if FileManager.default.fileExists(atPath: target) {
            // At the target with this store's id, and the config still naming the old file: the copy of a move
            // that stopped before its config edit. Anything else there is someone's file.
            guard !copy, let sourceID, Self.storeID(atPath: target) == sourceID else {
                throw StoreError(.cantCreate, "\(target) already exists; nothing was changed",
                                 hint: "choose another path, or remove \(target) first")
            }
            try Self.removeDatabaseFiles(target)
            step("target", "replaced the copy an earlier, unfinished move left at \(target)")
        }
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            throw StoreError(.cantCreate, "cannot create the folder \(folder) for \(target)",
                             hint: "check the permissions of its parent folder; nothing was changed")
        }

        // A move holds the write lock from before the copy until the old file is fenced: no write can land in the
        // old file after the snapshot the copy is made of.
        var lock: Connection?
        if !copy {
            lock = try Connection(path: source, mode: .readWrite, wal: false)
            do {
                try lock?.execute("BEGIN IMMEDIATE")
            } catch let error as SQLiteError where error.isBusy {
                throw StoreError(.tempFail, "another process holds the write lock of \(source)",
                                 hint: "run the same command again when that process is done; nothing was changed")
            }
            try checkStillAt(source, lock: lock)
            step("lock", "holding the write lock of \(source): writers wait until the move is done")
        }
        let partial = Path.join(folder, "." + Path.lastComponent(target) + ".storectl-partial")
        var renamed = false
        var configEdited = false
        defer {
            // Until config.yaml names the new file, a failure leaves the old setup exactly as it was.
            if !configEdited {
                try? Self.removeDatabaseFiles(partial)
                if renamed { try? Self.removeDatabaseFiles(target) }
                if let lock, lock.isInTransaction { try? lock.execute("ROLLBACK") }
            }
        }
        try Self.removeDatabaseFiles(partial)

        // The copy: one consistent snapshot, read inside one read transaction.
        let reader = try Connection(path: source, mode: .readOnly, wal: false)
        try reader.execute("BEGIN")
        let counts = try Self.rowCounts(reader)
        do {
            // The copy's connection is closed when this block ends: its WAL is checkpointed into the file before
            // the file gets its name.
            let copyDB = try Connection(path: partial, mode: .readWriteCreate, wal: false)
            do {
                report.pages = try reader.backup(into: copyDB, progress: progress)
            } catch let error as SQLiteError {
                throw StoreError(error.isFull ? .ioError : .cantCreate,
                                 "cannot copy \(source) to \(target): \(error.message)",
                                 hint: "check free space and permissions in \(folder); nothing was changed")
            }
            try reader.execute("COMMIT")
            step("copy", "copied \(report.pages) page(s) with the backup API into \(partial)")
            Failpoint.hit("move.after-copy")
            try checkCopy(copyDB, of: source, counts: counts, report: &report, step: step)
            try setIdentity(copyDB, copy: copy, source: source, target: target, report: &report, step: step)
        }
        Failpoint.hit("move.after-check")
        guard rename(partial, target) == 0 else {
            throw StoreError(.cantCreate, "cannot rename \(partial) to \(target): \(AtomicFile.errnoText())",
                             hint: "check the permissions of \(folder); nothing was changed")
        }
        renamed = true
        AtomicFile.syncFolder(folder)
        step("rename", "the new file is \(target)")
        Failpoint.hit("move.after-rename")

        if copy {
            configEdited = true  // nothing to undo: the copy is finished and config.yaml names the original
            step("config", "unchanged: stores.\(settings.name).path still names \(source)")
            report.steps = steps
            return report
        }
        let value = configValue(forPath: target)
        try ConfigEditor.set(path: config.path, displayPath: nil, key: "stores.\(settings.name).path", value: value,
                             environment: environment)
        configEdited = true
        report.configPath = value
        step("config", "stores.\(settings.name).path: \(value) in \(config.path) (comments kept)")
        Failpoint.hit("move.after-config")

        if let lock {
            try Self.fence(lock, movedTo: target)
            try lock.execute("COMMIT")
            step("fence", "a writer that still has \(source) open now gets an error naming \(target)")
        }
        Failpoint.hit("move.after-fence")
        lock = nil
        try Self.removeDatabaseFiles(source)
        AtomicFile.syncFolder(Path.parent(source))
        report.oldFileRemoved = true
        step("remove", "removed \(source)")
        // The move is complete: the new file no longer needs to know where it came from.
        let moved = try Connection(path: target, mode: .readWrite, wal: false)
        if try moved.tableExists("_storectl_meta") {
            try moved.transaction { try MirrorState.setMeta(moved, .movedFrom, nil) }
        }
        report.steps = steps
        return report
    }

    /// Checks the copy: `PRAGMA integrity_check` says ok, and every table holds as many rows as in the original.
    private func checkCopy(_ copyDB: Connection, of source: String, counts: [String: Int64], report: inout MoveReport,
                           step: (String, String) -> Void) throws
    {
        let integrity = try copyDB.integrityCheck()
        report.integrity = integrity.joined(separator: "; ")
        guard integrity == ["ok"] else {
            throw StoreError(.ioError, "the copy of \(source) failed its integrity check: \(report.integrity)",
                             hint: "check the disk of \(Path.parent(report.to)); the store was not changed")
        }
        let copied = try Self.rowCounts(copyDB)
        guard copied == counts else {
            let differing = Set(counts.keys).union(copied.keys).filter { copied[$0] != counts[$0] }.sorted()
            throw StoreError(.ioError, "the copy of \(source) does not hold the same rows (tables "
                             + differing.joined(separator: ", ") + ")", hint: "retry; the store was not changed")
        }
        step("check", "integrity ok, \(counts.values.reduce(0, +)) row(s) in \(counts.count) table(s), as in the original")
    }

    /// The identity of the copy: kept by a move, new for a copy. Both record where the file now is.
    private func setIdentity(_ copyDB: Connection, copy: Bool, source: String, target: String,
                             report: inout MoveReport, step: (String, String) -> Void) throws
    {
        guard try copyDB.tableExists("_storectl_meta") else { return }
        try copyDB.transaction {
            if copy {
                try MirrorState.setMeta(copyDB, .storeID, UUID().uuidString.lowercased())
                try MirrorState.setMeta(copyDB, .movedFrom, nil)
            } else {
                try MirrorState.setMeta(copyDB, .movedFrom, source)
            }
            try MirrorState.setMeta(copyDB, .storePath, target)
        }
        report.storeID = try MirrorState.meta(copyDB, .storeID)
        step("identity", copy ? "the copy has a new store id \(report.storeID ?? "?")"
             : "the store keeps its id \(report.storeID ?? "?")")
    }

    /// Refuses a move whose source changed between loading the config and taking the lock: another storectl moved
    /// the store meanwhile.
    private func checkStillAt(_ source: String, lock: Connection?) throws {
        let current = try? ConfigLoader.load(path: config.path, environment: environment)
            .store(named: settings.name).path
        let movedTo = try lock.flatMap { db in
            try db.tableExists("_storectl_meta") ? try MirrorState.meta(db, .movedTo) : nil
        }
        if let movedTo {
            throw StoreError(.tempFail, "store '\(settings.name)' was moved to \(movedTo) while this command started",
                             hint: "check stores.\(settings.name).path in \(config.path); nothing was changed")
        }
        if let current, Path.standardized(current) != source {
            throw StoreError(.tempFail, "stores.\(settings.name).path in \(config.path) changed to \(current) while "
                             + "this command started", hint: "run the command again; nothing was changed")
        }
    }

    /// Finishes a move that stopped after its config edit: fences and removes the old file, when it is still there
    /// and is the same store. Returns whether it removed it.
    private func removeMovedFrom(_ old: String, to target: String, step: (String, String) -> Void) throws -> Bool {
        guard old != target, FileManager.default.fileExists(atPath: old),
              let id = Self.storeID(atPath: target), Self.storeID(atPath: old) == id
        else { return false }
        let lock = try Connection(path: old, mode: .readWrite, wal: false)
        try lock.transaction {
            if try lock.tableExists("_storectl_meta"), try MirrorState.meta(lock, .movedTo) == nil {
                try Self.fence(lock, movedTo: target)
            }
        }
        try Self.removeDatabaseFiles(old)
        AtomicFile.syncFolder(Path.parent(old))
        step("remove", "finished an earlier move: removed \(old), whose store now lives at \(target)")
        return true
    }

    /// Makes every write to the old file fail with a message naming the new one: a BEFORE trigger on every table,
    /// plus meta `moved_to`. Runs inside the lock's transaction.
    static func fence(_ db: Connection, movedTo target: String) throws {
        if try db.tableExists("_storectl_meta") {
            try StoreMeta.set(db, .movedTo, target)
        }
        let message = SQLiteError.storeMovedPrefix + "\(target); open it there"
        let tables = try db.query("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' "
                                  + "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").compactMap { $0[0].string }
        for (i, table) in tables.enumerated() {
            for (op, when) in [("i", "INSERT"), ("u", "UPDATE"), ("d", "DELETE")] {
                try db.execute("""
                    CREATE TRIGGER IF NOT EXISTS main.\(quoteIdentifier("_storectl_moved_\(i)_\(op)"))
                    BEFORE \(when) ON \(quoteIdentifier(table)) BEGIN SELECT RAISE(ABORT, \(quoteLiteral(message))); END
                    """)
            }
        }
    }

    /// The row count of every table of the main schema.
    static func rowCounts(_ db: Connection) throws -> [String: Int64] {
        var counts: [String: Int64] = [:]
        for row in try db.query("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'") {
            guard let name = row[0].string else { continue }
            counts[name] = try db.scalar("SELECT count(*) FROM main.\(quoteIdentifier(name))")?.int64 ?? 0
        }
        return counts
    }

    /// The store id of the store file at `path`, or nil when it is not a storectl store.
    static func storeID(atPath path: String) -> String? {
        guard let db = try? Connection(path: path, mode: .readOnly, wal: false) else { return nil }
        return try? StoreMeta.value(db, .storeID)
    }

    /// Removes a database file and its journal, WAL and shared-memory files.
    static func removeDatabaseFiles(_ path: String) throws {
        for file in [path, path + "-wal", path + "-shm", path + "-journal"] {
            if unlink(file) != 0 && errno != ENOENT {
                throw StoreError(.cantCreate, "cannot remove \(file): \(AtomicFile.errnoText())",
                                 hint: "check the permissions of \(Path.parent(file))")
            }
        }
    }

    /// How `path` is written in config.yaml: relative to the config's folder when it is inside it, else absolute.
    func configValue(forPath path: String) -> String {
        let folder = config.directory.hasSuffix("/") ? config.directory : config.directory + "/"
        return path.hasPrefix(folder) ? String(path.dropFirst(folder.count)) : path
    }
}
