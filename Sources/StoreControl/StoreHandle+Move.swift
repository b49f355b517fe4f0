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
    /// A move keeps the store's identity. Its steps, in order: take the write lock of the old file (writers wait);
    /// copy into a temporary file; check the copy (`PRAGMA integrity_check`, the same rows in every table); rename it
    /// to `target`; fence the old file (a BEFORE trigger on every table and meta `moved_to`, committed under the
    /// write lock, so that no write can land in it afterwards: a writer gets an error naming the new path); edit
    /// `stores.NAME.path` in config.yaml (comments kept); remove the old file. A copy gets a new identity and leaves
    /// the old file and config.yaml as they were.
    ///
    /// Killed at any step, the same command run again finishes without losing a write:
    /// - before the fence, the old file is the store; a copy left at `target` (with meta `move_snapshot`, what the
    ///   old file held when it was copied) is replaced when only the old file was written since, finishes the move
    ///   when only the copy was written since, and makes the command refuse (65, nothing changed) when both were;
    /// - after the fence, the old file refuses every write: the rerun edits config.yaml and removes it.
    ///
    /// A target that is, or would make, a file of a store is refused: a store's own file or another store's (by
    /// path, through symbolic links or `..`, or by hard link), a `-wal`, `-shm` or `-journal` companion of one, a
    /// path whose companion is a store's file, and a path whose companions already exist.
    /// - Parameter target: an absolute path.
    /// - Throws: `StoreError`: 66 when the store is missing, 64 for a target that is (or goes with) the file of a
    ///   store, 73 when the target or its companions exist or cannot be created, 65 when both files of an
    ///   unfinished move were written, 75 when the write lock or the config moved under it; `SQLiteError`.
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
        try checkTarget(target, source: source)
        let folder = Path.parent(target)
        let sourceDB = try database()
        let sourceID = try MirrorState.meta(sourceDB, .storeID)
        let fencedTo = try sourceDB.tableExists("_storectl_meta") ? try MirrorState.meta(sourceDB, .movedTo) : nil
        close()
        if !copy, let fencedTo, Path.standardized(fencedTo) == target, let sourceID,
           Self.storeID(atPath: target) == sourceID
        {
            // An earlier move fenced the old file and stopped before its config edit: no write can have landed in
            // the old file since, so the store is the new file; finish.
            try requireNothingLandedAfterTheFence(old: source, target: target)
            step("fence", "\(source) was fenced by an earlier move: the store is \(target)")
            try finishMove(lock: nil, source: source, target: target, report: &report, step: step)
            report.steps = steps
            return report
        }
        if let fencedTo {
            // The old file refuses writes: the store is wherever that move put it, not here.
            let moved = Path.standardized(fencedTo)
            if moved != target, sourceID != nil, Self.storeID(atPath: moved) == sourceID {
                throw StoreError(.tempFail, "store '\(settings.name)' was moved to \(moved) by a move that has not "
                                 + "finished (\(source) refuses writes); nothing was changed",
                                 hint: "finish that move first: 'storectl migrate --to \(moved)'")
            }
            throw StoreError(.dataError, "store '\(settings.name)': \(source) refuses writes (a move fenced it for "
                             + "\(moved)), but \(moved) does not hold the store; nothing was changed",
                             hint: "put the moved file back at \(moved), then run 'storectl migrate --to \(moved)'")
        }
        var adopt = false
        if Self.entryExists(target) {
            // At the target with this store's id, and the config still naming the old file: the copy of a move
            // that stopped before its fence. Anything else there is someone's file.
            guard !copy, let sourceID, Self.storeID(atPath: target) == sourceID else {
                throw StoreError(.cantCreate, "\(target) already exists; nothing was changed",
                                 hint: "choose another path, or remove \(target) first")
            }
            switch try Self.writtenSinceCopy(old: source, copy: target) {
            case (_, false):
                // The old file is the store and holds everything the copy does, and more if it was written.
                try Self.removeDatabaseFiles(target)
                step("target", "replaced the copy an earlier, unfinished move left at \(target)")
            case (false, true):
                adopt = true
            case (true, true):
                throw StoreError(.dataError, "store '\(settings.name)': both \(source) and \(target) were written "
                                 + "after an earlier, unfinished move copied the one to the other; nothing was changed",
                                 hint: "keep one of them: copy the rows you need from \(target) into \(source) "
                                    + "(for example with sqlite3), remove \(target), then run 'storectl migrate --to "
                                    + "\(target)' again")
            }
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
        if adopt, let lock {
            // Only the copy was written since it was made: checked again under the lock, it is the store.
            guard try Self.writtenSinceCopy(old: source, copy: target) == (false, true) else {
                try? lock.execute("ROLLBACK")
                throw StoreError(.tempFail, "\(source) was written while this command started; nothing was changed",
                                 hint: "run the same command again")
            }
            step("target", "the copy an earlier, unfinished move left at \(target) was written since, and "
                 + "\(source) was not: the copy is the store")
            try finishMove(lock: lock, source: source, target: target, report: &report, step: step)
            report.storeID = sourceID
            report.integrity = "not checked"
            report.steps = steps
            return report
        }
        let partial = Path.join(folder, "." + Path.lastComponent(target) + ".storectl-partial")
        var renamed = false
        var fenced = false
        defer {
            // Until the old file is fenced, a failure leaves the old setup exactly as it was.
            if !fenced {
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
        let snapshot = try Self.snapshot(reader)
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
            try setIdentity(copyDB, copy: copy, source: source, target: target, snapshot: snapshot,
                            report: &report, step: step)
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
            fenced = true  // nothing to undo: the copy is finished and config.yaml names the original
            step("config", "unchanged: stores.\(settings.name).path still names \(source)")
            report.steps = steps
            return report
        }
        try finishMove(lock: lock, source: source, target: target, report: &report, step: step) {
            fenced = true
        }
        report.steps = steps
        return report
    }

    /// The last steps of a move, from a copy at `target` that is the store: fence the old file and commit (when
    /// `lock` holds its write lock), edit config.yaml, remove the old file, and forget where the new one came from.
    private func finishMove(lock: Connection?, source: String, target: String, report: inout MoveReport,
                            step: (String, String) -> Void, fenced: () -> Void = {}) throws
    {
        if let lock {
            try Self.fence(lock, movedTo: target)
            try lock.execute("COMMIT")
            fenced()
            step("fence", "\(source) refuses writes from now on: a writer that still has it open gets an error "
                 + "naming \(target)")
        }
        Failpoint.hit("move.after-fence")
        let value = configValue(forPath: target)
        do {
            try ConfigEditor.set(path: config.path, displayPath: nil, key: "stores.\(settings.name).path",
                                 value: value, environment: environment)
        } catch var error as StoreError {
            error.hint = (error.hint.map { $0 + "; then " } ?? "") + "run 'storectl migrate --to \(target)' again to "
                + "finish the move (\(source) already refuses writes; the store is \(target))"
            throw error
        }
        report.configPath = value
        step("config", "stores.\(settings.name).path: \(value) in \(config.path) (comments kept)")
        Failpoint.hit("move.after-config")
        try Self.removeDatabaseFiles(source)
        AtomicFile.syncFolder(Path.parent(source))
        report.oldFileRemoved = true
        step("remove", "removed \(source)")
        // The move is complete: the new file no longer needs to know where it came from.
        let moved = try Connection(path: target, mode: .readWrite, wal: false)
        if try moved.tableExists("_storectl_meta") {
            try moved.transaction {
                try MirrorState.setMeta(moved, .movedFrom, nil)
                try MirrorState.setMeta(moved, .moveSnapshot, nil)
            }
            report.storeID = try MirrorState.meta(moved, .storeID)
        }
    }

    /// Refuses a target that is, or goes with, the file of a store: the source or another store's file (by path,
    /// symbolic links and `..` resolved, or the same inode), a companion (`-wal`, `-shm`, `-journal`) of one, a path
    /// one of whose companions is a store's file; and a new target whose companions already exist.
    private func checkTarget(_ target: String, source: String) throws {
        let companions = ["-wal", "-shm", "-journal"]
        let targetReal = Self.resolved(target)
        var stores = config.stores.map { (name: $0.name, path: Path.standardized($0.path)) }
        if !stores.contains(where: { $0.path == source }) { stores.append((settings.name, source)) }
        for store in stores {
            let whose = store.name == settings.name ? "store '\(store.name)' itself (the file being moved)"
                : "store '\(store.name)'"
            let paths = Set([store.path, Self.resolved(store.path)])
            if paths.contains(target) || paths.contains(targetReal) || Self.sameFile(target, store.path) {
                let how = paths.contains(target) ? "" : " (through a link)"
                throw StoreError(.usage, "\(target) is the file of \(whose)\(how) in \(config.path); nothing was "
                                 + "changed", hint: "name a path no store uses")
            }
            for suffix in companions {
                if paths.contains(where: { $0 + suffix == target || $0 + suffix == targetReal }) {
                    throw StoreError(.usage, "\(target) is the \(suffix) companion file of \(store.path), the file "
                                     + "of \(whose); SQLite would delete or overwrite it; nothing was changed",
                                     hint: "name a path that does not end in -wal, -shm or -journal")
                }
                if paths.contains(where: { $0 == target + suffix || $0 == targetReal + suffix }) {
                    throw StoreError(.usage, "\(target) would have \(store.path), the file of \(whose), as its "
                                     + "\(suffix) companion file; SQLite would delete or overwrite it; nothing was "
                                     + "changed", hint: "name a path no store's file starts with")
                }
            }
        }
        if !Self.entryExists(target) {
            for suffix in companions where Self.entryExists(target + suffix) {
                throw StoreError(.cantCreate, "\(target + suffix) already exists: SQLite would take it for the "
                                 + "\(suffix) file of \(target); nothing was changed",
                                 hint: "choose another path, or remove \(target + suffix) first")
            }
        }
    }

    /// The path with symbolic links and `..` resolved as far as the path exists (the rest appended).
    static func resolved(_ path: String) -> String {
        if let real = realpath(path, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        let parent = Path.parent(path)
        guard parent != path, !parent.isEmpty, parent != "/" else { return path }
        return Path.join(resolved(parent), Path.lastComponent(path))
    }

    /// Whether both paths exist and are the same file (device and inode): a hard link, or a link to it.
    static func sameFile(_ a: String, _ b: String) -> Bool {
        var x = stat()
        var y = stat()
        guard stat(a, &x) == 0, stat(b, &y) == 0 else { return false }
        return x.st_dev == y.st_dev && x.st_ino == y.st_ino
    }

    /// Whether anything is at `path`, a dangling symbolic link included.
    static func entryExists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
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
    private func setIdentity(_ copyDB: Connection, copy: Bool, source: String, target: String, snapshot: String,
                             report: inout MoveReport, step: (String, String) -> Void) throws
    {
        guard try copyDB.tableExists("_storectl_meta") else { return }
        try copyDB.transaction {
            if copy {
                try MirrorState.setMeta(copyDB, .storeID, UUID().uuidString.lowercased())
                try MirrorState.setMeta(copyDB, .movedFrom, nil)
            } else {
                try MirrorState.setMeta(copyDB, .movedFrom, source)
                try MirrorState.setMeta(copyDB, .moveSnapshot, snapshot)
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
        let current = try? ConfigLoader.load(path: config.path, environment: environment, isolateStoreErrors: true)
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

    /// Finishes a move that stopped after its config edit: removes the old file, when it is still there and is
    /// the same store, and no write can be lost with it. A move by this storectl fenced it before the config edit;
    /// an old file left unfenced (by an older storectl) is removed only when it holds nothing the new one lacks.
    /// Returns whether it removed it.
    /// - Throws: `StoreError` 65 when the old file holds writes the new one lacks (nothing is changed).
    private func removeMovedFrom(_ old: String, to target: String, step: (String, String) -> Void) throws -> Bool {
        guard old != target, FileManager.default.fileExists(atPath: old),
              let id = Self.storeID(atPath: target), Self.storeID(atPath: old) == id
        else { return false }
        let lock = try Connection(path: old, mode: .readWrite, wal: false)
        try lock.transaction {
            guard try lock.tableExists("_storectl_meta") else { return }
            if let fencedTo = try MirrorState.meta(lock, .movedTo), Path.standardized(fencedTo) == target,
               try Self.fenceIsWhole(lock)
            {
                return
            }
            // Not fenced: writes may have landed in it after the copy was taken.
            let recorded = try Self.recordedSnapshot(atPath: target)
            // (ATTACH cannot run inside a transaction: the comparison reads the old file on a connection of its own.)
            let written = try recorded.map { try Self.snapshot(lock) != $0 }
                ?? !Self.tablesWithRowsNotIn(Connection(path: old, mode: .readOnly, wal: false), other: target).isEmpty
            if written {
                throw StoreError(.dataError, "store '\(settings.name)': \(old), the file an earlier move left behind, "
                                 + "was written after it was copied to \(target); removing it would lose those "
                                 + "writes; nothing was changed",
                                 hint: "copy the rows you need from \(old) into \(target) (for example with sqlite3), "
                                    + "then remove \(old)")
            }
            try Self.fence(lock, movedTo: target)
        }
        try Self.removeDatabaseFiles(old)
        AtomicFile.syncFolder(Path.parent(old))
        step("remove", "finished an earlier move: removed \(old), whose store now lives at \(target)")
        let moved = try Connection(path: target, mode: .readWrite, wal: false)
        if try moved.tableExists("_storectl_meta") {
            try moved.transaction {
                try MirrorState.setMeta(moved, .movedFrom, nil)
                try MirrorState.setMeta(moved, .moveSnapshot, nil)
            }
        }
        return true
    }

    /// What a store file holds, in one line: its newest history seq, and the row count and a checksum of the rows
    /// of every table (the meta aside, which a move itself writes). Every write to a tracked table moves the seq;
    /// an insert, an update or a delete in any table moves its count or its checksum.
    static func snapshot(_ db: Connection) throws -> String {
        let seq = try db.tableExists("_storectl_history")
            ? try db.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0 : 0
        let counts = try rowCounts(db).filter { $0.key != "_storectl_meta" }.sorted { $0.key < $1.key }
        return "seq=\(seq);" + (try counts.map { table, count in
            "\(table)=\(count):" + String(try checksum(db, table: table), radix: 16)
        }).joined(separator: ";")
    }

    /// A checksum of a table's rows that does not depend on their order: the wrapping sum of the FNV-1a hash of
    /// each row's quoted values.
    static func checksum(_ db: Connection, table: String) throws -> UInt64 {
        let columns = try db.columns(of: table).map { "quote(\(quoteIdentifier($0.name)))" }
        guard !columns.isEmpty else { return 0 }
        let sql = "SELECT " + columns.joined(separator: " || ',' || ") + " FROM main.\(quoteIdentifier(table))"
        var sum: UInt64 = 0
        try db.prepare(sql).forEach { row in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in row.bytes(0) { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            sum = sum &+ hash
        }
        return sum
    }

    /// The snapshot a move's copy recorded of the old file, or nil (a copy made by an older storectl).
    static func recordedSnapshot(atPath path: String) throws -> String? {
        let db = try Connection(path: path, mode: .readOnly, wal: false)
        guard try db.tableExists("_storectl_meta") else { return nil }
        return try StoreMeta.value(db, .moveSnapshot)
    }

    /// Which of the two files of an unfinished move were written after the copy was taken: the old file, and the
    /// copy. Without a recorded snapshot (an older storectl), a file that holds rows the other lacks was written.
    static func writtenSinceCopy(old: String, copy: String) throws -> (old: Bool, copy: Bool) {
        let oldDB = try Connection(path: old, mode: .readOnly, wal: false)
        let copyDB = try Connection(path: copy, mode: .readOnly, wal: false)
        if let recorded = try recordedSnapshot(atPath: copy) {
            return (try snapshot(oldDB) != recorded, try snapshot(copyDB) != recorded)
        }
        return (!(try tablesWithRowsNotIn(oldDB, other: copy)).isEmpty,
                !(try tablesWithRowsNotIn(copyDB, other: old)).isEmpty)
    }

    /// The tables of `db` holding a row that the same table of the store file `other` lacks (or that `other` does
    /// not have, or cannot be compared with), the meta aside.
    static func tablesWithRowsNotIn(_ db: Connection, other: String) throws -> [String] {
        try db.execute("ATTACH DATABASE \(quoteLiteral(other)) AS storectl_other")
        defer { try? db.execute("DETACH DATABASE storectl_other") }
        var differing: [String] = []
        let tables = try db.query("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' "
                                  + "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> '_storectl_meta'")
            .compactMap { $0[0].string }
        for table in tables {
            let name = quoteIdentifier(table)
            let extra = try? db.scalar("SELECT EXISTS (SELECT * FROM main.\(name) EXCEPT SELECT * FROM "
                                       + "storectl_other.\(name))")?.int64
            if extra != 0 { differing.append(table) }
        }
        return differing
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
            for (op, when) in [(Character("i"), "INSERT"), ("u", "UPDATE"), ("d", "DELETE")] {
                try db.execute("""
                    CREATE TRIGGER IF NOT EXISTS main.\(quoteIdentifier(StoreFormat.moveFenceTriggerName(index: i, op: op)))
                    BEFORE \(when) ON \(quoteIdentifier(table)) BEGIN SELECT RAISE(ABORT, \(quoteLiteral(message))); END
                    """)
            }
        }
    }

    /// Whether the fence of a moved store's old file is whole: meta `moved_to`, and a BEFORE trigger for each of
    /// insert, update and delete on every table. A fence someone took apart may have let writes in.
    static func fenceIsWhole(_ db: Connection) throws -> Bool {
        guard try db.tableExists("_storectl_meta"), try MirrorState.meta(db, .movedTo) != nil else { return false }
        let rows = try db.query("""
            SELECT t.name, (SELECT count(*) FROM sqlite_master m WHERE m.type = 'trigger' AND m.tbl_name = t.name
                            AND m.name LIKE '\\_storectl\\_moved\\_%' ESCAPE '\\')
            FROM pragma_table_list t WHERE t.schema = 'main' AND t.type = 'table'
              AND t.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
            """)
        return rows.allSatisfy { ($0[1].int64 ?? 0) >= 3 }
    }

    /// Refuses to finish a move whose old file's fence is not whole and which changed since the copy was made: a
    /// write may have landed in it after the fence went.
    private func requireNothingLandedAfterTheFence(old: String, target: String) throws {
        let db = try Connection(path: old, mode: .readOnly, wal: false)
        guard try !Self.fenceIsWhole(db) else { return }
        let recorded = try Self.recordedSnapshot(atPath: target)
        let written = try recorded.map { try Self.snapshot(db) != $0 }
            ?? !Self.tablesWithRowsNotIn(db, other: target).isEmpty
        guard written else { return }
        throw StoreError(.dataError, "store '\(settings.name)': \(old) was fenced by a move to \(target), but its fence "
                         + "was taken apart and it was written since it was copied; removing it would lose those writes; "
                         + "nothing was changed",
                         hint: "copy the rows you need from \(old) into \(target) (for example with sqlite3), then "
                            + "remove \(old) and run 'storectl migrate --to \(target)' again")
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
