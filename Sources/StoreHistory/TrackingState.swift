/// Whether history tracking is installed and matches the store's schema.
public enum TrackingState: Equatable, Sendable {
    /// Every tracked table has its triggers, and they match the schema.
    case ok
    /// The store has no `_storectl_meta` (run `storectl init`).
    case notInitialized
    /// The schema changed since the triggers were generated: the details say how. `storectl migrate` repairs it
    /// without losing history.
    case drift([String])
    /// Triggers of these tracked tables are missing (dropped by hand, or the table was rebuilt), so changes to
    /// them may not have been recorded: tracking is lost. Only `storectl migrate --force` repairs it, and it
    /// records a history gap.
    case triggersMissing([String])

    /// A short stable name: `ok`, `not-initialized`, `drift` or `triggers-missing`.
    public var name: String {
        switch self {
        case .ok: return "ok"
        case .notInitialized: return "not-initialized"
        case .drift: return "drift"
        case .triggersMissing: return "triggers-missing"
        }
    }

    /// Whether tracking is installed and up to date.
    public var isOK: Bool { self == .ok }

    /// The state in one sentence.
    public var reason: String {
        switch self {
        case .ok:
            return "history tracking is installed and up to date"
        case .notInitialized:
            return "history tracking is not installed (the store has no _storectl_meta table)"
        case .drift(let details):
            return "the schema changed since the history triggers were generated: " + details.joined(separator: "; ")
        case .triggersMissing(let tables):
            return "history tracking is lost: the triggers of " + tables.map { "'\($0)'" }.joined(separator: ", ")
                + " are missing, so changes to " + (tables.count == 1 ? "it" : "them") + " may not have been recorded"
        }
    }
}

/// Everything `HistoryTracker.inspect()` found: the state, plus the drift details even when triggers are missing.
public struct TrackingReport: Equatable, Sendable {
    /// The overall state (missing triggers win over drift).
    public var state: TrackingState
    /// How the schema changed, one line each (empty when it did not).
    public var drift: [String]
    /// The tracked tables whose triggers are missing.
    public var missingTriggers: [String]
    /// Meta `history_gap`: the newest seq when tracking was last reinstalled with `--force`, if ever.
    public var historyGap: Int64?

    public init(state: TrackingState, drift: [String] = [], missingTriggers: [String] = [], historyGap: Int64? = nil) {
        self.state = state
        self.drift = drift
        self.missingTriggers = missingTriggers
        self.historyGap = historyGap
    }
}

/// What `HistoryTracker.install()` did.
public struct InstallReport: Equatable, Sendable {
    /// True when this call installed tracking; false when the store was already initialized and up to date.
    public var installed: Bool
    /// The store's id (meta `store_id`).
    public var storeID: String
    /// The tracked tables, sorted.
    public var tables: [String]
    /// The schema hash now in meta.
    public var schemaHash: String
}

/// What `HistoryTracker.migrate(force:)` did.
public struct MigrateReport: Equatable, Sendable {
    /// The state before the migration.
    public var before: TrackingState
    /// The drift that was repaired, one line each.
    public var repaired: [String]
    /// Whether the triggers were regenerated (false when everything was already up to date).
    public var regenerated: Bool
    /// The tracked tables after the migration, sorted.
    public var tables: [String]
    /// The schema hash now in meta.
    public var schemaHash: String
    /// When tracking had been lost and `force` reinstalled it: the history gap recorded in meta.
    public var historyGap: Int64?
}
