import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreConfig
import StoreMirror
import StoreSQLite

/// What `storectl seed` did.
public struct SeedReport: Sendable, Codable, Equatable {
    public var seed: String
    /// `seeded` (this store inserted the rows), `already-seeded` (this store did before), `seeded-elsewhere`
    /// (another device holds the marker; its rows arrive by sync), or `seeded-locally` (local mode: the marker is
    /// claimed when sync is enabled).
    public var outcome: String
    /// Rows inserted by this run.
    public var inserted: Int
    /// The device that holds the cloud marker, when known.
    public var markerOwner: String?
}

extension StoreHandle {
    /// The seed settings as the sync engine takes them.
    /// - Throws: `StoreError` (78) when there is no `seed:` section; (66) when the SQL file is unreadable.
    public func seedDefinition() throws -> SeedDefinition {
        guard let seed = settings.seed else {
            throw StoreError(.config, "store '\(settings.name)' has no seed: section in \(config.path)",
                             hint: "add stores.\(settings.name).seed with a name and sql: or rows:")
        }
        var sql: String?
        if let path = seed.sql {
            do {
                sql = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw StoreError(.noInput, "cannot read the seed file \(path)",
                                 hint: "check stores.\(settings.name).seed.sql in \(config.path)")
            }
        }
        return SeedDefinition(name: seed.name, sql: sql, rows: seed.rows)
    }

    /// `storectl seed`: inserts the default data exactly once across every device that shares the account.
    ///
    /// In cloud mode: sync first (retrying for up to `timeout` seconds), claim the seed's marker atomically, insert
    /// the rows with deterministic record names, export. In local mode the rows are inserted (with the same
    /// deterministic names) and the marker is claimed when sync is enabled.
    /// - Throws: `StoreError`, `AccountUnavailableError`, sync errors.
    public func seed(timeout: Double = 10, progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws
        -> SeedReport
    {
        let definition = try seedDefinition()
        try ensureInitialized()
        try requireTracking()
        let db = try database()
        try MirrorState.install(db)
        if try Seeder.isDone(db, definition) {
            return SeedReport(seed: definition.name, outcome: "already-seeded", inserted: 0, markerOwner: nil)
        }
        let entities = try Mirror.entityMaps(db)
        let rules = try mirrorRules()
        guard try storeMode() == .cloud else {
            let n = try Seeder.insert(db, definition, entities: entities, rules: rules, markerPending: true)
            return SeedReport(seed: definition.name, outcome: "seeded-locally", inserted: n, markerOwner: nil)
        }
        _ = try requireAvailableAccount()
        let mirror = try openMirror()
        // 1. Sync first, so that rows another device seeded are here before we decide.
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            do {
                _ = try mirror.sync(progress: progress)
                break
            } catch let error as CloudError where error.kind == .temporary && Date() < deadline {
                usleep(200_000)
            }
        }
        // 2. Claim the marker atomically.
        let (created, marker) = try mirror.cloud.createMarker(zone: mirror.options.zone, name: definition.markerName,
                                                              device: mirror.device, payload: "{}")
        if !created && marker.createdBy != mirror.device {
            try db.transaction { try Seeder.markDone(db, definition, how: "elsewhere:" + marker.createdBy) }
            return SeedReport(seed: definition.name, outcome: "seeded-elsewhere", inserted: 0, markerOwner: marker.createdBy)
        }
        Failpoint.hit("seed.after-marker")
        // 3. Insert with deterministic record names, then 4. export.
        let n = try Seeder.insert(db, definition, entities: entities, rules: rules, markerPending: false)
        Failpoint.hit("seed.after-commit")
        _ = try mirror.exportChanges { progress("export", $0, $1) }
        return SeedReport(seed: definition.name, outcome: "seeded", inserted: n, markerOwner: mirror.device)
    }

    /// The `unique:` rules in the sync engine's terms.
    public func mirrorRules() throws -> [String: UniqueRule] {
        try checkEntityColumns()
        var rules: [String: UniqueRule] = [:]
        for e in settings.entities {
            guard let unique = e.unique, !unique.isEmpty else { continue }
            let keep: UniqueRule.Keep
            switch e.keep ?? .first {
            case .newest(let c): keep = .newest(c)
            case .oldest(let c): keep = .oldest(c)
            case .first: keep = .first
            }
            rules[e.name] = UniqueRule(columns: unique, keep: keep)
        }
        return rules
    }
}

extension StoreHandle {
    /// `storectl dedupe`: finds and resolves duplicates of `unique:` keys that already exist (for example after
    /// adopting an old store). Works in local mode too; the deletes are exported by the next sync.
    /// - Throws: `StoreError` (78) when no `unique:` rule is configured; `SQLiteError`.
    public func dedupe(entity: String?, dryRun: Bool) throws -> DedupReport {
        let rules = try mirrorRules()
        guard !rules.isEmpty else {
            throw StoreError(.config, "store '\(settings.name)' declares no unique: keys",
                             hint: "add entities.<table>.unique: [columns] (and keep:) in \(config.path)")
        }
        if let entity, rules[entity] == nil {
            throw StoreError(.usage, "table '\(entity)' has no unique: key in store '\(settings.name)'",
                             hint: "tables with unique keys: \(rules.keys.sorted().joined(separator: ", "))")
        }
        try requireTracking()
        let db = try database()
        let entities = try Mirror.entityMaps(db)
        return try Mirror.dedupe(db: db, entities: entities, rules: rules, entity: entity, dryRun: dryRun)
    }
}
