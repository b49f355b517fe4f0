import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreConfig
import StoreMirror
import StoreSQLite

/// The switch to cloud mode did not verify: the store and its zone differ in ways no pending change explains.
public struct SwitchVerifyError: DiagnosedError {
    public var store: String?
    public var report: VerifyReport
    /// Whether the store was put back as it was before the switch.
    public var restored: Bool
    /// Why it was not, when it was not.
    public var notRestoredBecause: String?
    public var exitCode: ExitCode { .software }
    public var summary: String {
        "after the switch, store '\(store ?? "?")' and zone '\(report.zone)' differ: "
            + "\(report.unexplainedCount) row(s) that no pending change explains"
    }
    public var details: [String] {
        var lines = report.differences.filter { $0.pending == nil }.prefix(20).map { d in
            "  \(d.table) \(d.key?.display ?? d.recordName): \(d.state.replacingText("_", with: " "))"
                + (d.columns.isEmpty ? "" : ": " + d.columns.map { c in
                    "\(c.column) \(c.local?.display ?? "-") here, \(c.cloud?.display ?? "-") in the cloud"
                }.joined(separator: "; "))
        }
        if restored {
            lines.append("  the store was restored to its state before the switch; config.yaml still says "
                         + "mode: local; what was exported stays in the zone")
        } else {
            lines.append("  the store was not restored (\(notRestoredBecause ?? "?")); it stays in local mode")
        }
        return lines
    }
    public var hint: String? {
        "look at the rows with 'storectl verify' (the zone may have been changed behind storectl's back), fix them, "
            + "then run 'storectl mode cloud' again"
    }
}

extension StoreHandle {
    /// The state one `mode cloud` carries from step to step, whether it runs or only plans.
    final class EnableRun {
        let options: SyncOptions
        let progress: (String, Int, Int?) -> Void
        var plan: SwitchPlan?
        var mirror: Mirror?
        var report: SyncReport?
        var exported: ExportReport?
        var verified: VerifyReport?
        /// The copy of the store taken before the first step that changes its sync state.
        var snapshot: String?
        var snapshotSeq: Int64 = 0

        init(options: SyncOptions, progress: @escaping (String, Int, Int?) -> Void) {
            self.options = options
            self.progress = progress
        }
    }

    /// One step of `mode cloud`: what the dry run says it would do (reading only), and what the switch does.
    struct EnableStep {
        let name: String
        let plan: (EnableRun) throws -> String
        let run: (EnableRun) throws -> String
    }

    /// The steps of `mode cloud`, in order: ONE list, which the dry run and the switch both walk.
    var enableSteps: [EnableStep] {
        [
            EnableStep(name: "config", plan: { _ in "valid (\(self.config.path))" },
                       run: { _ in "valid (\(self.config.path))" }),
            EnableStep(name: "account", plan: { r in
                let a = r.plan?.account
                return "\(a?.account ?? "?") is \(a?.status ?? "?")" + (a?.status == "available" ? "" : ": \(a?.reason ?? "")")
            }, run: { _ in
                let account = try self.requireAvailableAccount()
                let share = try self.requireZoneShare()
                try self.requireZoneKey()
                return "\(account.account ?? "?") is \(account.status.rawValue)" + share
            }),
            EnableStep(name: "history", plan: { r in
                r.plan?.mode == "uninitialised" ? "initialise the store and install the triggers" : "verify the triggers"
            }, run: { _ in
                let installed = try self.ensureInitialized()
                try self.requireTracking()
                return installed ? "initialised the store and installed the triggers" : "triggers verified"
            }),
            EnableStep(name: "cloud check", plan: { _ in
                guard self.exists else { return "check that every tracked table can be mirrored" }
                let check = try self.cloudCheck()
                return check.ok ? "\(check.entities.count) table(s) can be mirrored"
                    : "\(check.problemCount) table problem(s) would stop the switch (see 'storectl cloud check')"
            }, run: { _ in
                let db = try self.database()
                try self.checkEntityColumns()
                let check = try CloudCheck.run(db, tables: try Mirror.trackedTables(db), uniqueRules: self.uniqueRules,
                                               everyTable: self.settings.entities.isEmpty,
                                               encrypted: self.encryptedColumns)
                guard check.ok else { throw CloudCheckError(report: check) }
                return "\(check.entities.count) table(s) can be mirrored"
            }),
            EnableStep(name: "snapshot", plan: { r in
                r.options.noSync ? "skipped (--no-sync)"
                    : "keep a copy of the store, to put it back if the content does not verify"
            }, run: { r in
                guard !r.options.noSync else { return "skipped (--no-sync)" }
                try self.takeSnapshot(r)
                // The copy is removed once the switch verified (or put back when it did not): no path to keep.
                return "kept a copy of the store, removed once the switch has verified"
            }),
            EnableStep(name: "bind", plan: { _ in
                let cloud = try self.cloudSettings()
                return "bind the store to account '\(cloud.account ?? "")' in \(cloud.container), zone '\(cloud.zone)'"
            }, run: { r in
                let cloud = try self.cloudSettings()
                // The triggers were verified by the history step, in this process, moments ago.
                r.mirror = try self.openMirror(r.options, trackingVerified: true)
                return "bound to account '\(cloud.account ?? "")' in \(cloud.container), zone '\(cloud.zone)'"
            }),
            EnableStep(name: "export", plan: { r in
                guard !r.options.noSync, let p = r.plan else { return "skipped (--no-sync)" }
                return p.export.baseline ? "a baseline of \(p.export.rows) row(s)"
                    : "\(p.export.rows) row(s) with pending changes"
            }, run: { r in
                guard !r.options.noSync, let mirror = r.mirror else { return "skipped (--no-sync)" }
                let exported = try mirror.exportChanges { r.progress("export", $0, $1) }
                r.exported = exported
                return exported.baseline ? "baseline: \(exported.saved) record(s) saved"
                    : "\(exported.saved) saved, \(exported.deleted) deleted"
            }),
            EnableStep(name: "import", plan: { r in
                guard !r.options.noSync, let p = r.plan else { return "skipped (--no-sync)" }
                guard p.import.known else { return "import the cloud's changes (the zone could not be read now)" }
                return "\(p.import.records ?? 0) record(s) and \(p.import.deletions ?? 0) deletion(s) from other devices, "
                    + "\(p.expectedConflicts) expected conflict(s)"
            }, run: { r in
                guard !r.options.noSync, let mirror = r.mirror, let exported = r.exported else { return "skipped (--no-sync)" }
                let imported = try mirror.importChanges { r.progress("import", $0, $1) }
                try MirrorState.setMeta(try self.database(), .lastSyncAt,
                                        String(Int64(Date().timeIntervalSince1970 * 1000)))
                r.report = SyncReport(exported: exported, imported: imported)
                return "\(imported.applied) applied, \(imported.deleted) deleted"
            }),
            EnableStep(name: "verify", plan: { r in
                r.options.noSync ? "skipped (--no-sync)"
                    : "compare every table with the zone; if anything differs, put the store back and exit 70"
            }, run: { r in
                guard !r.options.noSync, let mirror = r.mirror else { return "skipped (--no-sync)" }
                return try self.verifySwitch(r, cloud: mirror.cloud)
            }),
            EnableStep(name: "mode", plan: { _ in "write mode: cloud into the store and into \(self.config.path)" },
                       run: { r in
                try self.writeMode(.cloud)
                r.dropSnapshot()
                return "cloud"
            }),
        ]
    }

    /// `storectl mode cloud`: the steps of enabling sync, in order (`enableSteps`). With `dryRun`, the same steps
    /// are walked and each says what it would do, with the plan (`switchPlan()`); nothing is changed. With
    /// `expectPlan`, the switch first makes the plan again and refuses (exit 75) when its id differs.
    /// - Throws: `AccountUnavailableError` (69/75) before anything changes; `StalePlanError` (75);
    ///   `SwitchVerifyError` (70) when the content does not verify after the switch; `StoreError`; sync errors.
    public func enableCloud(_ options: SyncOptions, expectPlan: String? = nil, log: (String) -> Void = { _ in },
                            progress: @escaping (String, Int, Int?) -> Void = { _, _, _ in }) throws -> ModeReport
    {
        var steps: [PlanStep] = []
        let previous: String = (try? storeMode())??.rawValue ?? "uninitialised"
        let run = EnableRun(options: options, progress: progress)
        defer { run.dropSnapshot() }
        if options.dryRun || expectPlan != nil {
            let plan = try switchPlan()
            run.plan = plan
            if let expectPlan, expectPlan != plan.planID {
                throw StalePlanError(store: settings.name, expected: expectPlan, plan: plan)
            }
        }
        let all = enableSteps
        func walk(_ some: ArraySlice<EnableStep>) throws {
            for step in some {
                let tStep = Trace.start()
                let detail = options.dryRun ? try step.plan(run) : try step.run(run)
                Trace.add("mode.\(step.name)", tStep)
                steps.append(PlanStep(step: step.name, detail: detail))
                log("\(step.name): \(detail)")
            }
        }
        // The steps up to the schema check may create the container file and the store file: a refusal there
        // removes them again.
        let firstBind = all.firstIndex { $0.name == "snapshot" } ?? all.count
        if options.dryRun {
            try walk(all[...])
        } else {
            try leavingNothingBehind { try walk(all[..<firstBind]) }
            do {
                try walk(all[firstBind...])
            } catch let error as ImportFirstError {
                throw ImportFirstSwitchError(store: settings.name, cause: error)
            }
        }
        return ModeReport(store: settings.name, from: previous, to: "cloud", dryRun: options.dryRun, steps: steps,
                          sync: run.report, plan: run.plan, verified: run.verified)
    }

    /// Takes the copy `mode cloud` puts back when the content does not verify.
    private func takeSnapshot(_ r: EnableRun) throws {
        let path = Path.join(Path.parent(settings.path), "." + Path.lastComponent(settings.path) + ".storectl-before-cloud")
        try Self.removeDatabaseFiles(path)
        let reader = try Connection(path: settings.path, mode: .readOnly, wal: false)
        try reader.execute("BEGIN")
        r.snapshotSeq = try reader.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
        let copy = try Connection(path: path, mode: .readWriteCreate, wal: false)
        r.snapshot = path
        try reader.backup(into: copy)
        try reader.execute("COMMIT")
        Failpoint.hit("switch.after-snapshot")
    }

    /// The verify step: the store and its zone must hold the same rows, but for changes still pending (other
    /// devices' saves after the import, the app's writes after the export). Otherwise the store is put back as the
    /// snapshot has it, and the switch fails with exit 70.
    private func verifySwitch(_ r: EnableRun, cloud: any CloudDatabase) throws -> String {
        let db = try database()
        let settings = try cloudSettings()
        let report = try Self.compare(db: db, store: self.settings.name, cloud: cloud, url: settings.url,
                                      zone: settings.zone, limit: 100)
        r.verified = report
        if report.unexplainedCount == 0 {
            let pending = report.differenceCount
            return "every table matches the zone (" + report.tables.map { "\($0.table) \($0.matching)" }
                .joined(separator: ", ") + ")" + (pending > 0 ? "; \(pending) row(s) with changes still pending" : "")
        }
        Failpoint.hit("switch.before-restore")
        // Writers other than this switch since the snapshot would lose their writes: the store is then left as it
        // is (in local mode), and says so.
        let foreign = try db.scalar("""
            SELECT count(*) FROM _storectl_history WHERE seq > ? AND author NOT IN (?, ?, 'dedupe')
            """, [r.snapshotSeq, MirrorState.importAuthor, MirrorState.cascadeAuthor])?.int64 ?? 0
        guard foreign == 0, let snapshot = r.snapshot else {
            throw SwitchVerifyError(store: self.settings.name, report: report, restored: false,
                                    notRestoredBecause: "\(foreign) change(s) were written by others during the switch")
        }
        close()
        let source = try Connection(path: snapshot, mode: .readOnly, wal: false)
        let dest = try Connection(path: self.settings.path, mode: .readWrite, wal: false)
        try source.backup(into: dest)
        throw SwitchVerifyError(store: self.settings.name, report: report, restored: true, notRestoredBecause: nil)
    }
}

extension StoreHandle.EnableRun {
    /// Removes the snapshot (after the switch, or when it failed before it needed it).
    func dropSnapshot() {
        if let snapshot { try? StoreHandle.removeDatabaseFiles(snapshot) }
        snapshot = nil
    }
}

/// `mode cloud` met a record that must be imported before this store's export (`ImportFirstError`): the store stays
/// in local mode, where `sync` refuses; the way on is to switch without the first sync, then sync, which imports
/// before it exports. Exit 75.
public struct ImportFirstSwitchError: DiagnosedError {
    public var store: String?
    public var cause: ImportFirstError
    public var exitCode: ExitCode { cause.exitCode }
    public var summary: String { cause.summary + "; store '\(store ?? "?")' stays in local mode" }
    public var hint: String? {
        "run 'storectl mode cloud --no-sync', then 'storectl sync' (it imports the cloud's changes, then exports)"
    }
}
