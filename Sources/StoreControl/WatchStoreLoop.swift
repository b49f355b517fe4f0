import FoundationEssentials
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

/// One store's life under `storectl watch`, on its own thread: wait for a reason, run a round, report it.
///
/// Not Sendable: it owns the store's connection (through its `StoreHandle`) and the PostgreSQL listener, which
/// never leave the thread that made them (checked by `confinement`).
final class StoreLoop {
    private let store: String
    private let config: Config
    private let lock: WatchLock
    private let options: WatchOptions
    private let output: any WatchOutput
    private let worker: StoreWorker
    private let handle: StoreHandle
    private let hook: RemoteChangeHook?
    private let notify: Bool
    /// The watcher's metrics file, when it writes one (`--metrics-file`).
    private let metrics: WatchMetrics?
    private let confinement = ThreadConfinement()

    /// The mode last seen in the store's meta: `local`, `cloud`, or `uninitialised`.
    private var mode: String
    private var dataVersion: Int64?
    /// When the first and the last local change of the burst waiting for a round were seen.
    private var burst: (first: Double, last: Double)?
    /// When the listener said another device saved to the zone.
    private var remoteWake: Double?
    /// When the last round ended (monotonic seconds).
    private var lastRoundEnded = 0.0
    private var nextPoll = 0.0
    private var backoff: WatchBackoff
    private var retryAt: Double?
    private var failing = false
    private var listener: PostgresChangeListener?
    private var listenerRetryAt = 0.0
    private var device: String?
    /// Where the store moved, while config.yaml still names this file (the move did not finish): no round runs.
    private var parkedAt: String?

    /// - Throws: `StoreError` when the config has no store `store`.
    init(store: String, config: Config, lock: WatchLock, options: WatchOptions, environment: [String: String],
         output: any WatchOutput, worker: StoreWorker, metrics: WatchMetrics?) throws
    {
        self.store = store
        self.metrics = metrics
        self.config = config
        self.lock = lock
        self.options = options
        self.output = output
        self.worker = worker
        self.handle = try StoreHandle(config: config, storeName: store, environment: environment)
        let settings = handle.settings
        self.backoff = WatchBackoff(initial: min(options.initialBackoff, options.maxBackoff), cap: options.maxBackoff)
        let cloud = settings.cloud
        self.notify = cloud?.remoteChangeNotifications ?? true
        if let command = cloud?.onRemoteChange, notify {
            let log: @Sendable (WatchLogLevel, String) -> Void = { [output] level, text in
                output.log(level, store: store, text)
            }
            do {
                self.hook = try RemoteChangeHook(command: command, timeout: cloud?.onRemoteChangeTimeout.seconds ?? 30,
                                                 directory: config.directory, environment: environment, log: log)
            } catch {
                output.log(.error, store: store, "on_remote_change will not run: \(error)")
                self.hook = nil
            }
        } else {
            self.hook = nil
        }
        self.mode = "uninitialised"
    }

    func run() {
        confinement.check("a store's watch loop")
        mode = currentMode()
        if mode != "cloud" {
            output.log(.info, store: store, modeNote(mode))
        } else {
            output.log(.info, store: store, "in cloud mode: syncing")
        }
        metrics?.update(currentGauges(), store: store)
        if options.once {
            if mode == "cloud" { round() }
            finish()
            return
        }
        nextPoll = 0
        while !worker.stopRequested, !worker.followRequested {
            waitALittle()
            if worker.stopRequested { break }
            let now = monotonicNow()
            checkLocal(now)
            if isDue(now) { round() }
        }
        finish()
    }

    private func finish() {
        listener = nil
        hook?.stop(grace: options.hookGrace)
        handle.close()
    }

    // MARK: - Waiting

    /// Sleeps one check period, or less when the PostgreSQL listener hears from another device.
    private func waitALittle() {
        guard let listener, mode == "cloud" else {
            usleep(useconds_t(options.checkEvery * 1e6))
            return
        }
        do {
            let wakes = try listener.wait(timeout: options.checkEvery, excludingDevice: device)
            // A save to another zone, or one this store has already fetched past, starts no round.
            if let zone = handle.settings.cloud?.zone, remoteWake == nil,
               case let saves = wakes.filter({ $0.zone == zone }), !saves.isEmpty
            {
                let known = serverToken(zone: zone)
                if saves.contains(where: { $0.isNew(after: known) }) { remoteWake = monotonicNow() }
            }
        } catch {
            output.log(.warning, store: store, "stopped listening for changes (\(WatchErrorBody(error, store: store).message));"
                       + " polling every \(WatchTime.seconds(options.interval)) until the next round succeeds")
            self.listener = nil
        }
    }

    /// The server token the store's last import recorded for `zone`; nil when it cannot be read (then every wake-up
    /// is taken as news).
    private func serverToken(zone: String) -> ServerChangeToken? {
        guard let db = try? handle.database() else { return nil }
        guard let raw = (try? MirrorState.serverToken(db, zone: zone)) ?? nil else { return nil }
        return ServerChangeToken(rawValue: raw)
    }

    /// Opens the PostgreSQL listener after a successful round, when the container is PostgreSQL.
    private func ensureListener() {
        guard listener == nil, let cloud = handle.settings.cloud, monotonicNow() >= listenerRetryAt,
              case .postgres(let url) = try? CloudConnector.backend(of: cloud.url)
        else { return }
        do {
            let db = try PostgresCloudDatabase(url: url, container: cloud.container, account: cloud.account,
                                               password: cloud.secret?.value, environment: handle.environment)
            listener = try db.changeListener()
        } catch {
            listenerRetryAt = monotonicNow() + options.interval
            output.log(.warning, store: store, "cannot listen for changes (\(WatchErrorBody(error, store: store).message));"
                       + " polling every \(WatchTime.seconds(options.interval))")
        }
    }

    // MARK: - Reasons for a round

    /// The mode in the store's meta: it is the truth, whatever config.yaml says (another process may have
    /// switched it).
    private func currentMode() -> String {
        (try? handle.storeMode())?.rawValue ?? "uninitialised"
    }

    private func modeNote(_ mode: String) -> String {
        if mode == "local" { return "in local mode: the cloud is not contacted until the store is switched to cloud mode" }
        // A file missing at its path was moved (or never made): the fix is the path, never a new, empty store.
        if !handle.exists {
            return "\(handle.settings.path) does not exist; if the file was moved, run 'storectl config set "
                + "stores.\(handle.settings.name).path NEW_PATH': waiting for it"
        }
        return "the store is not initialised yet (run 'storectl init'): waiting for it"
    }

    /// Follows a mode switch made by another process.
    private func followMode(_ now: Double) {
        let current = currentMode()
        guard current != mode else { return }
        let previous = mode
        mode = current
        output.event(.mode(ModeEvent(store: store, at: WatchTime.now(), mode: current, previous: previous)))
        output.log(.info, store: store, current == "cloud" ? "switched to cloud mode: syncing" : modeNote(current))
        metrics?.update(currentGauges(), store: store)
        if current == "cloud" {
            nextPoll = now
            retryAt = nil
            backoff.reset()
        } else {
            listener = nil
            burst = nil
            remoteWake = nil
        }
    }

    /// Looks at the store: another connection committed (`PRAGMA data_version` moved) and left history to export,
    /// or switched the mode.
    private func checkLocal(_ now: Double) {
        guard handle.exists, let db = try? handle.database() else {
            if now >= nextPoll {
                nextPoll = now + options.interval
                if followMove() { return }
                followMode(now)
            }
            return
        }
        if parkedAt != nil, now >= nextPoll {
            nextPoll = now + options.interval
            if followMove() { return }
        }
        // "The integer values returned by two invocations of "PRAGMA data_version" from the same connection will
        // be different if changes were committed to the database by any other connection in the interim."
        let version = (try? db.scalar("PRAGMA data_version"))?.int64
        let moved = version != dataVersion
        dataVersion = version
        if moved, followMove() { return }
        if !moved {
            if mode != "cloud", now >= nextPoll {
                nextPoll = now + options.interval
                followMode(now)
            }
            return
        }
        followMode(now)
        guard mode == "cloud", hasLocalChanges(db) else { return }
        burst = (burst?.first ?? now, now)
    }

    /// Follows a move of the store file (`migrate --to`): the file refuses writes (meta `moved_to`) or is gone.
    /// When config.yaml names the new path, which holds the same store, the supervisor is asked to serve it there;
    /// otherwise the watcher says what is true (once) and runs no round on this file. Returns whether the store moved.
    private func followMove() -> Bool {
        let here = Path.standardized(handle.settings.path)
        var movedTo: String?
        var id: String?
        if let db = try? handle.database(), (try? db.tableExists("_storectl_meta")) == true {
            movedTo = (try? MirrorState.meta(db, .movedTo)).flatMap { $0 }.map { Path.standardized($0) }
            id = (try? MirrorState.meta(db, .storeID)).flatMap { $0 }
        }
        guard movedTo != nil || !handle.exists else {
            parkedAt = nil
            return false
        }
        if let current = try? ConfigLoader.load(path: config.path, environment: handle.environment,
                                                isolateStoreErrors: true),
           let configured = (try? current.store(named: store)).map({ Path.standardized($0.path) }),
           configured != here, movedTo == nil || movedTo == configured,
           let movedID = StoreHandle.storeID(atPath: configured), id == nil || movedID == id
        {
            output.log(.info, store: store, "store '\(store)' moved to \(configured), which \(config.path) names: "
                       + "following it")
            worker.requestFollow()
            return true
        }
        guard let movedTo else { return false }
        if parkedAt != movedTo {
            parkedAt = movedTo
            burst = nil
            output.log(.warning, store: store, "store '\(store)' moved to \(movedTo), but \(config.path) still names "
                       + "\(here): run 'storectl --store \(store) migrate --to \(movedTo)' to finish the move; no sync "
                       + "runs on \(here) until then")
        }
        return true
    }

    /// Whether history holds changes after the export token that did not come from the cloud.
    private func hasLocalChanges(_ db: Connection) -> Bool {
        guard let token = try? MirrorState.exportToken(db) else { return false }
        let pending = try? db.scalar("SELECT 1 FROM _storectl_history WHERE seq > ? AND author <> ? LIMIT 1",
                                     [token, MirrorState.importAuthor])
        return pending != nil
    }

    private func isDue(_ now: Double) -> Bool {
        guard mode == "cloud", parkedAt == nil else { return false }
        if let retryAt { return now >= retryAt }
        if now >= nextPoll { return true }
        if let burst, now - burst.last >= options.debounce || now - burst.first >= options.maxDebounce { return true }
        // A few batches of one export each notify: waiting a debounce takes them in one round.
        if let remoteWake, now - remoteWake >= options.remoteDebounce, now - lastRoundEnded >= options.remoteGap {
            return true
        }
        return false
    }

    // MARK: - A round

    /// One sync round, reported: events for what it exported and imported, or an error and a retry.
    private func round() {
        confinement.check("a store's watch loop")
        // A save heard is news: the round need not first ask whether the container changed.
        if remoteWake != nil { handle.quietMark = nil }
        burst = nil
        remoteWake = nil
        retryAt = nil
        let before = (try? handle.database()).flatMap { try? HistoryTracker(db: $0).latestSeq() } ?? 0
        // A round gets SQLite's default page cache (2,000 KiB); the checks between rounds, a small one.
        if let db = try? handle.database() { try? db.execute("PRAGMA cache_size = -2000") }
        let started = monotonicNow()
        var seconds = 0.0
        let result: String
        do {
            let report = try handle.sync(SyncOptions())
            seconds = monotonicNow() - started
            result = ExitCode.ok.kind
            succeeded(report, historyBefore: before)
        } catch {
            seconds = monotonicNow() - started
            result = WatchErrorBody(error, store: store).kind
            // Rows too large to send: the rest of the round went through, and what it imported is announced.
            if let notSent = error as? RowsNotSentError, let report = notSent.report {
                announce(report, historyBefore: before)
            }
            failed(error)
        }
        metrics?.roundFinished(store: store, result: result, seconds: seconds, gauges: currentGauges())
        // The connection lives as long as the watcher: between rounds it keeps a small page cache, so that its
        // memory follows what the checks need, not the size the store has grown to (a full cache per store made
        // the soak's resident size creep up for its first half hour). "PRAGMA shrink_memory: This pragma causes the
        // database connection on which it is invoked to free up as much memory as it can."
        idleCache()
        // What this round wrote on its own connection does not move data_version; what others wrote meanwhile does.
        lastRoundEnded = monotonicNow()
        nextPoll = lastRoundEnded + options.interval
        if let retryAt, retryAt > nextPoll { nextPoll = retryAt }
    }

    /// The store's gauges for the metrics file, read on this thread's connection; nil when they cannot be read
    /// now (the file is locked, say), so that the last ones stay.
    private func currentGauges() -> StoreGauges? {
        confinement.check("a store's watch loop")
        return try? handle.gauges()
    }

    /// Shrinks the store connection's page cache to what the checks between rounds need.
    private func idleCache() {
        guard handle.exists, let db = try? handle.database() else { return }
        try? db.execute("PRAGMA cache_size = -\(Self.idleCacheKiB); PRAGMA shrink_memory")
    }

    /// The page cache between rounds, in KiB.
    static let idleCacheKiB = 256

    private func succeeded(_ report: SyncReport, historyBefore: Int64) {
        if failing {
            failing = false
            lock.record(lastError: nil)
            output.log(.info, store: store, "sync works again after \(backoff.attempt) failed attempt(s)")
        }
        backoff.reset()
        for warning in report.warnings ?? [] { output.log(.warning, store: store, warning) }
        announce(report, historyBefore: historyBefore)
        if device == nil, let db = try? handle.database() { device = try? MirrorState.storeID(db) }
        ensureListener()
    }

    /// The round's events: what it exported, and what it imported (read back from history), with the
    /// `on_remote_change` hook.
    private func announce(_ report: SyncReport, historyBefore: Int64) {
        let e = report.exported
        if e.saved + e.deleted > 0 {
            let event = ExportEvent(store: store, at: WatchTime.now(), saved: e.saved, deleted: e.deleted,
                                    conflictsResolved: e.conflictsResolved, baseline: e.baseline, token: e.token)
            output.event(.exported(event))
        }
        if notify, let event = importEvent(after: historyBefore, report: report.imported) {
            output.event(.imported(event))
            hook?.enqueue(RemoteChangeJob(store: store, token: event.token, count: event.count,
                                          entities: event.entities, serverToken: event.serverToken,
                                          transaction: event.transaction))
        }
    }

    /// The import's changes, read back from history: the rows authored `cloud-import` after `seq`.
    private func importEvent(after seq: Int64, report: ImportReport) -> ImportEvent? {
        guard let db = try? handle.database() else { return nil }
        do {
            guard let summary = try db.query("""
                SELECT count(*), max(seq), max(tx) FROM _storectl_history WHERE seq > ? AND author = ?
                """, [seq, MirrorState.importAuthor]).first, let count = summary[0].int64, count > 0
            else { return nil }
            let entities = try db.query("""
                SELECT DISTINCT entity FROM _storectl_history WHERE seq > ? AND author = ? ORDER BY entity
                """, [seq, MirrorState.importAuthor]).compactMap { $0[0].string }
            let changes = try HistoryTracker(db: db).changes(after: seq, author: MirrorState.importAuthor,
                                                             limit: options.maxChangesPerEvent)
            return ImportEvent(
                store: store, at: WatchTime.now(), author: MirrorState.importAuthor, token: summary[1].int64 ?? seq,
                transaction: summary[2].int64, serverToken: report.token, count: Int(count), entities: entities,
                changes: changes.map { change in
                    ImportedChange(entity: change.entity, key: change.primaryKey.map(ImportedChange.KeyValue.init),
                                   op: Self.word(change.op), seq: change.seq)
                },
                changesTruncated: Int(count) > changes.count, applied: report.applied, deleted: report.deleted)
        } catch {
            output.log(.warning, store: store, "imported changes, but cannot read them back from history: \(error)")
            return nil
        }
    }

    private static func word(_ op: HistoryChange.Operation) -> String {
        switch op {
        case .insert: return "insert"
        case .update: return "update"
        case .delete: return "delete"
        }
    }

    private func failed(_ error: any Error) {
        // The store may have been switched to local mode in the meantime: then this is no error.
        handle.close()
        dataVersion = nil
        let now = monotonicNow()
        // A store moved under the round (`migrate --to`): following it is the whole answer, not an error.
        if followMove() { return }
        followMode(now)
        guard mode == "cloud" else { return }
        let body = WatchErrorBody(error, store: store)
        let ms = WatchTime.nowMilliseconds()
        output.event(.error(ErrorEvent(store: store, at: WatchTime.iso(ms), error: body)))
        let record = SyncErrorRecord(at: ms, error: body)
        lock.record(lastError: record)
        // A passphrase that does not open the zone's key leaves the store as it was: `status` finds it by itself.
        if !(error is ZoneKeyError) { handle.recordSyncError(record) }
        handle.close()
        failing = true
        if options.once {
            worker.fail(ExitCode(body.code))
            return
        }
        let delay = backoff.next()
        let next = ms + Int64(delay * 1000)
        let retry = RetryEvent(store: store, at: WatchTime.iso(ms), attempt: backoff.attempt, delaySeconds: delay,
                               nextAttemptAt: WatchTime.iso(next), reason: body.message, code: body.code)
        output.event(.retry(retry))
        retryAt = now + delay
    }
}
