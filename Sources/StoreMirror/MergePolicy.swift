import StoreBase

/// How a conflict between a local change and a cloud change to the same record is resolved.
///
/// The property policies work per column: the local side's changed columns come from history (every column of
/// an inserted row), and the server's changed columns are those that differ from the base (the fields as last
/// synced). One function, `decide`, says what every policy means; the export (a save that met a newer server
/// record) and the import (a server record that met a local change) both call it, so the two directions agree.
public enum MergePolicy: String, Sendable, CaseIterable, Codable {
    /// Stop, report the conflict, and change nothing for that record (exit 65).
    case error
    /// The cloud's record replaces the local row.
    case serverWins = "server-wins"
    /// The local row replaces the cloud's record.
    case localWins = "local-wins"
    /// Per column: the cloud's value wins where the cloud changed it; local changes to other columns survive.
    case propertyServerWins = "property-server-wins"
    /// Per column: local changes win; the cloud's changes to other columns are kept. This is the default, the
    /// analogue of `NSMergeByPropertyObjectTrumpMergePolicy`.
    case propertyLocalWins = "property-local-wins"
}

/// One side of a conflict, as the merge decision sees it.
struct MergeSide: Equatable {
    /// Whether this side deleted the record (or holds a tombstone).
    var deleted: Bool
    /// The columns this side changed since the last sync (every column for an insert; empty for a delete).
    var changed: Set<String>
    /// Every change of the local side is storectl's own, none a user's: references of children re-pointed at the
    /// winner of a merge (author `dedupe`, reference columns only), which the merges the import brings redo on
    /// every device.
    var derived = false
    /// The local row was deleted and another row inserted at its key since the last export: the row there now is
    /// a new row, not the record the key was mapped to (which the local side deleted).
    var recreated = false
}

/// What a conflict resolves to, column by column.
enum MergeDecision: Equatable {
    /// Change nothing and report the conflict (policy `error`).
    case fail
    /// The record ends deleted on both sides.
    case deleted
    /// The record ends live: these columns take the server's value, every other column keeps the local one. When
    /// the local row is gone, every column takes the server's value.
    case live(takeServer: Set<String>)
}

extension MergePolicy {
    /// What a conflict between `local` and `server` over a record of `columns` resolves to.
    ///
    /// | policy | local deleted | server deleted | both live |
    /// |---|---|---|---|
    /// | error | fail | fail | fail (the server's record when it holds the local values already) |
    /// | server-wins | server's record | deleted | every column from the server, but the columns of a UNIQUE key the local side changed and the server did not |
    /// | local-wins | deleted | local row | every column from the local row, but the columns of a UNIQUE key the server changed and the local side did not |
    /// | property-local-wins | deleted | local row | the server's value where the local side did not change it (a UNIQUE key counts whole) |
    /// | property-server-wins | server's record | deleted | the server's value where it changed it, or where the local side did not (a UNIQUE key counts whole) |
    ///
    /// `serverHoldsLocalValues`: both sides are live and the server's record has, in every column the local side
    /// changed, the value the local row holds (two devices made the same change, such as re-pointing a child at
    /// the winner of a merge). Taking the server's record then loses nothing, so it is no conflict even under
    /// `error`; the other policies decide as without it. Likewise a local side whose changes are all storectl's
    /// own (`derived`): `error` arbitrates between users' edits, and a re-point made here, by a merge another
    /// device made differently (at another step of the same chain of duplicates), is no user's edit; the
    /// server's record stands (a deletion too), and the merges the import brings re-point the row again.
    ///
    /// `uniqueKeys`: the table's UNIQUE keys (constraints and `unique:` rules), each a set of columns. A value the
    /// server moved between rows (a swap, a reorder) is never put back by a row-level `local-wins` whose side did
    /// not touch that key, and a value the local side moved is never put back by a row-level `server-wins` whose
    /// side did not touch it (the other half of the local swap may be saved already): the old value would then be
    /// held by two records, and the rows merged as duplicates. A key is decided whole: a key of several columns
    /// (`UNIQUE(list, pos)`) takes all its columns from one side, under every policy, the property policies too:
    /// one column from each side makes a value neither side had, which another row may hold (`keysWhole`).
    func decide(local: MergeSide, server: MergeSide, columns: [String],
                serverHoldsLocalValues: Bool = false, uniqueKeys: [Set<String>] = []) -> MergeDecision {
        let all = Set(columns)
        switch self {
        case .error:
            if local.derived && !local.deleted { return server.deleted ? .deleted : .live(takeServer: all) }
            return serverHoldsLocalValues && !local.deleted && !server.deleted ? .live(takeServer: all) : .fail
        case .serverWins:
            if server.deleted { return .deleted }
            if local.deleted { return .live(takeServer: all) }
            return .live(takeServer: keysWhole(all, local: local.changed, server: server.changed, uniqueKeys: uniqueKeys,
                                               prefersServer: true))
        case .localWins:
            if local.deleted { return .deleted }
            if server.deleted { return .live(takeServer: []) }
            return .live(takeServer: keysWhole([], local: local.changed, server: server.changed, uniqueKeys: uniqueKeys,
                                               prefersServer: false))
        case .propertyLocalWins:
            if local.deleted { return .deleted }
            if server.deleted { return .live(takeServer: []) }
            return .live(takeServer: keysWhole(all.subtracting(local.changed), local: local.changed,
                                               server: server.changed, uniqueKeys: uniqueKeys, prefersServer: false))
        case .propertyServerWins:
            if server.deleted { return .deleted }
            if local.deleted { return .live(takeServer: all) }
            return .live(takeServer: keysWhole(all.subtracting(local.changed.subtracting(server.changed)),
                                               local: local.changed, server: server.changed, uniqueKeys: uniqueKeys,
                                               prefersServer: true))
        }
    }

    /// `take` (the columns the policy takes from the server, column by column), with each UNIQUE key's value
    /// taken whole from one side: the merged row's key is a value the local row or the server's record holds,
    /// never a mix of the two.
    ///
    /// A key only one side changed is that side's: the other side holds the key's old value, which a swap or a
    /// reorder on the changing side may have given to another row already. A key both sides changed goes by the
    /// policy (`prefersServer`), unless it shares a changed column with a key that is one side's by the rule
    /// above (or by this one): then it follows that key, so the shared column is decided once. Only a chain of
    /// keys where the two rules meet (a key only the local side changed, through a key both changed, to a key only
    /// the server changed) leaves the middle key mixed: each end keeps its side, which a move may have handed on.
    /// (`RecordApplier.resolveUnique` never takes such a mix for a duplicate of the row that holds it.)
    private func keysWhole(_ take: Set<String>, local: Set<String>, server: Set<String>, uniqueKeys: [Set<String>],
                           prefersServer: Bool) -> Set<String>
    {
        // Each key's columns that differ between the sides, and the side it must take (nil: either).
        var keys: [(differing: Set<String>, server: Bool?)] = uniqueKeys.compactMap { key in
            let (l, s) = (!key.isDisjoint(with: local), !key.isDisjoint(with: server))
            guard l || s else { return nil }
            return (key.intersection(local.union(server)), l && s ? nil : s)
        }
        let forced = keys.map { $0.server != nil }
        // Keys both sides changed follow a decided key they share a changed column with, until nothing changes.
        var changed = true
        while changed {
            changed = false
            for i in keys.indices where keys[i].server == nil {
                if let j = keys.indices.first(where: { keys[$0].server != nil
                                                       && !keys[$0].differing.isDisjoint(with: keys[i].differing) })
                {
                    keys[i].server = keys[j].server
                    changed = true
                }
            }
        }
        // The keys one side alone changed go last: in a chain, the key in the middle is the one left mixed.
        var take = take
        for key in zip(keys, forced).sorted(by: { !$0.1 && $1.1 }).map(\.0) {
            if key.server ?? prefersServer { take.formUnion(key.differing) } else { take.subtract(key.differing) }
        }
        return take
    }
}

/// A conflict that was not resolved (policy `error`).
public struct ConflictReport: Sendable, Codable, Equatable {
    public var entity: String
    public var recordName: String
    public var localColumns: [String]
    public var serverDeleted: Bool
}

/// Raised when the merge policy is `error` and conflicts were found.
/// An export met a newer server record that gives a row a UNIQUE value another local row holds: the holder's own
/// record may move it away (a swap, a reorder), which only an import sees whole. `Mirror.sync` imports, then
/// exports again; on its own (or when the second export meets it again) it is a temporary failure.
public struct ImportFirstError: DiagnosedError {
    public var entity: String
    public var recordName: String
    /// What happened to the record, in words.
    public var why = "changed in the cloud to a UNIQUE value another row holds here"
    public var exitCode: ExitCode { .tempFail }
    public var summary: String {
        "record \(recordName) of table '\(entity)' \(why); the cloud's other changes must be imported first"
    }
    public var hint: String? { "run 'storectl sync' again (it imports, then exports)" }
}

public struct ConflictError: DiagnosedError {
    public var conflicts: [ConflictReport]
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "\(conflicts.count) conflict(s) between local changes and the cloud, and merge_policy is 'error'"
    }
    public var details: [String] {
        // A conflict of a local delete has no local columns.
        conflicts.prefix(20).map { "  \($0.entity) \($0.recordName): "
            + ($0.localColumns.isEmpty ? "deleted here" : "local changed [\($0.localColumns.joined(separator: ", "))]")
            + ($0.serverDeleted ? ", deleted in the cloud" : ", changed in the cloud") }
    }
    public var hint: String? {
        "choose a merge_policy (server-wins, local-wins, property-server-wins, property-local-wins) and run 'storectl sync' again"
    }
}
