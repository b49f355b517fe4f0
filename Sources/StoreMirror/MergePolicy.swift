import StoreBase

/// How a conflict between a local change and a cloud change to the same record is resolved.
///
/// The property policies work per column: the local side's changed columns come from history (every column of
/// an inserted row), and the server's changed columns are those that differ from the base (the fields as last
/// synced).
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

/// What to do with one conflicting record.
enum Resolution {
    /// Save these fields (or the deletion) to the cloud over the server's tag, and make the local row match.
    case saveMerged(fields: String, deleted: Bool)
    /// Make the local row match the server's record; save nothing.
    case takeServer
    /// Leave both sides alone and report the conflict.
    case fail
}

/// A conflict that was not resolved (policy `error`).
public struct ConflictReport: Sendable, Codable, Equatable {
    public var entity: String
    public var recordName: String
    public var localColumns: [String]
    public var serverDeleted: Bool
}

/// Raised when the merge policy is `error` and conflicts were found.
public struct ConflictError: DiagnosedError {
    public var conflicts: [ConflictReport]
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "\(conflicts.count) conflict(s) between local changes and the cloud, and merge_policy is 'error'"
    }
    public var details: [String] {
        conflicts.prefix(20).map { "  \($0.entity) \($0.recordName): local changed [\($0.localColumns.joined(separator: ", "))]"
            + ($0.serverDeleted ? ", deleted in the cloud" : ", changed in the cloud") }
    }
    public var hint: String? {
        "choose a merge_policy (server-wins, local-wins, property-server-wins, property-local-wins) and run 'storectl sync' again"
    }
}

extension MergePolicy {
    /// Resolves one conflict.
    ///
    /// - Parameters:
    ///   - localFields: the local row's fields, or nil when the row was deleted locally.
    ///   - localChanged: the columns changed locally since the last export.
    ///   - server: the server's fields, or nil when the server holds a tombstone.
    ///   - base: the fields as last synced, if known.
    func resolve(localFields: String?, localChanged: [String], server: String?, base: String?, columns: [String],
                 codec: FieldCodec) throws -> Resolution
    {
        switch self {
        case .error:
            return .fail
        case .serverWins:
            return .takeServer
        case .localWins:
            if let localFields { return .saveMerged(fields: localFields, deleted: false) }
            return .saveMerged(fields: "{}", deleted: true)
        case .propertyLocalWins:
            guard let localFields else { return .saveMerged(fields: "{}", deleted: true) }
            guard let server else { return .saveMerged(fields: localFields, deleted: false) }
            return .saveMerged(fields: try codec.overlay(server, with: localFields, columns: localChanged), deleted: false)
        case .propertyServerWins:
            guard let server else { return .takeServer }
            guard let localFields else { return .takeServer }
            let serverChanged = try codec.differing(base, server, columns: columns)
            return .saveMerged(fields: try codec.overlay(localFields, with: server, columns: serverChanged), deleted: false)
        }
    }
}
