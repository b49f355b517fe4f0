/// What applying one cloud record does here, decided without the database: the store's facts are read first
/// (`TombstoneFacts`, `LiveFacts`), the decision is a pure function of them (`TombstoneAction.decide`,
/// `LiveAction.decide`), and `RecordApplier` executes what it says.

/// What a tombstone from the cloud does here: a pure decision from what the store knows of the record, executed by
/// `RecordApplier.applyDeletion`. The facts are read first (`TombstoneFacts`), the decision is made without the
/// database (`TombstoneAction.decide`), and the executor only writes what it says.
struct TombstoneFacts: Equatable {
    /// Where the tombstone says its record went (`{"$alias": WINNER}`: merged as a duplicate elsewhere), or nil
    /// for a deletion.
    var aliasTarget: String?
    /// Whether the record map knows the record.
    var mapped: Bool
    /// Whether the local row the record map names for it exists.
    var rowExists: Bool
    /// The key of the winner's row, when the record map knows the winner and its row is here (an alias only).
    var winnerPK: String?
    /// Whether the mapped row is the winner itself (an alias only).
    var isWinner = false
    /// The local changes of the row since the last export (narrowed to the columns that differ from the base), or
    /// nil when there are none or they are not respected (the export brings a row to a merge it saved).
    var local: MergeSide?
    /// Whether local changes are respected at all (false when the export applies its own merge).
    var respectLocalChanges = true
    /// On a restored copy: the row was deleted and inserted again at its key in what the later self exported.
    var reinsertedInLaterSelfsExport = false
}

/// What applying a tombstone does.
enum TombstoneAction: Equatable {
    /// A merged duplicate whose winner's row is here: the row gives its children to the winner and goes.
    case mergeIntoWinner(winnerPK: String)
    /// A merged duplicate whose winner is not here yet: the row stays, noted, and is merged when the winner comes.
    case waitForWinner
    /// The record map does not know the record (an alias is recorded all the same): nothing to do.
    case nothing
    /// The row at the record's key is a new one (the old row was deleted here too): the record map marks the record
    /// deleted, and the new row stays (it gets a name of its own on export).
    case bothDeleted
    /// A local edit meets the deletion and the merge policy keeps the row: the next export saves it over the
    /// tombstone.
    case keepLocal
    /// A local edit meets the deletion under `merge_policy: error`: reported, nothing changes.
    case conflict(columns: [String])
    /// The row goes (when it exists), and the record map marks the record deleted.
    case delete
}

extension TombstoneAction {
    /// The decision for a tombstone of a record of a table with `columns`, under `policy`.
    static func decide(_ facts: TombstoneFacts, policy: MergePolicy, columns: [String]) -> TombstoneAction {
        guard facts.mapped else { return .nothing }
        if facts.aliasTarget != nil, facts.rowExists {
            if let winner = facts.winnerPK, !facts.isWinner { return .mergeIntoWinner(winnerPK: winner) }
            return .waitForWinner
        }
        guard facts.rowExists, facts.respectLocalChanges else { return .delete }
        if facts.local?.deleted != true, facts.local?.recreated == true || facts.reinsertedInLaterSelfsExport {
            return .bothDeleted
        }
        guard let local = facts.local, !local.deleted else { return .delete }
        switch policy.decide(local: local, server: MergeSide(deleted: true, changed: []), columns: columns) {
        case .fail: return .conflict(columns: local.changed.sorted())
        case .live: return .keepLocal
        case .deleted: return .delete
        }
    }
}

/// What the store knows of a live record from the cloud once its row is found (`RecordApplier.liveFacts`): the
/// input of `LiveAction.decide`.
struct LiveFacts: Equatable {
    /// The columns the record carries a value for.
    var recordColumns: Set<String>
    /// Whether the row the record stands for exists here.
    var rowExists: Bool
    /// The local side of a merge: the row's changes since the last export, narrowed to the columns whose value
    /// differs from the record's last synced version. Nil when there is nothing to merge with: no local change,
    /// local changes not respected (the export brings a row to a merge it saved), a row key allocated for the
    /// record just now, or a local delete of another record's row at the same key.
    var local: MergeSide?
    /// The columns the record changed since the version this store last synced (every column of a record new here).
    var serverChanged: Set<String> = []
    /// Whether the local row already holds the record's values in every column the local side changed.
    var serverHoldsLocalValues = false
}

/// What applying a live record does to its row.
enum LiveAction: Equatable {
    /// Under `merge_policy: error`, a local change meets the record: reported, nothing changes.
    case conflict(columns: [String])
    /// The local delete wins: the row stays deleted, and the record map takes the record's version so that the
    /// next export sends the tombstone over it.
    case keepLocalDelete
    /// The row takes these columns of the record (none: only the record map takes the new version).
    case update(columns: Set<String>)
    /// The row is inserted (new here, or re-created over a local delete) with these columns of the record.
    case insert(columns: Set<String>)
}

extension LiveAction {
    /// The decision for a live record of a table with `columns` (`uniqueKeys`: its UNIQUE constraints and its
    /// `unique:` rule, each a set of columns), under `policy`.
    static func decide(_ facts: LiveFacts, policy: MergePolicy, columns: [String], uniqueKeys: [Set<String>])
        -> LiveAction
    {
        guard let local = facts.local else {
            return facts.rowExists ? .update(columns: facts.recordColumns) : .insert(columns: facts.recordColumns)
        }
        switch policy.decide(local: local, server: MergeSide(deleted: false, changed: facts.serverChanged),
                             columns: columns, serverHoldsLocalValues: facts.serverHoldsLocalValues,
                             uniqueKeys: uniqueKeys) {
        case .fail:
            return .conflict(columns: local.changed.sorted())
        case .deleted:
            return .keepLocalDelete
        case .live(let takeServer):
            return facts.rowExists ? .update(columns: takeServer.intersection(facts.recordColumns))
                : .insert(columns: facts.recordColumns)
        }
    }
}
