import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreHistory
import StoreMirror
import StoreSQLite

/// A store file that is a copy of another store: both carry the same store id.
public struct CopiedStoreError: DiagnosedError {
    public var path: String
    public var original: String
    public var storeID: String
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "\(path) is a copy of the store \(original): both have store id \(storeID), so they would give different "
            + "rows the same record names and skip each other's changes"
    }
    public var details: [String] { ["  nothing was synced"] }
    public var hint: String? {
        "give the copy an identity of its own with 'storectl init --new-identity' (its rows and their record names "
            + "are kept), or remove one of the two files"
    }
}

extension StoreHandle {
    /// Refuses to sync a store file that is a copy of another one (same store id, the other file still there).
    /// A store that was moved just records its new place.
    /// - Throws: `CopiedStoreError` (exit 65).
    public func checkIdentity() throws {
        if let copy = try copiedStore() { throw copy }
        let db = try database()
        let here = Path.standardized(settings.path)
        if try MirrorState.meta(db, .storePath) != here {
            try db.transaction { try MirrorState.setMeta(db, .storePath, here) }
        }
    }

    /// The refusal `sync` would make because this file is a copy of another store file, if it is one. Reads only:
    /// `doctor` reports it without changing anything.
    public func copiedStore() throws -> CopiedStoreError? {
        let db = try database()
        let here = Path.standardized(settings.path)
        guard let recorded = try MirrorState.meta(db, .storePath), recorded != here,
              FileManager.default.fileExists(atPath: recorded) else { return nil }
        let ours = try MirrorState.storeID(db)
        let other = try? Connection(path: recorded, mode: .readOnly, wal: false)
        let theirs = try other.flatMap { try StoreMeta.value($0, .storeID) }
        return theirs == ours ? CopiedStoreError(path: here, original: recorded, storeID: ours) : nil
    }

    /// `storectl init --new-identity`: a new store id for a copied store file. Rows, history, the record map and
    /// the tokens stay: the copy's rows are the same records as the original's; only rows created from now on get
    /// record names of their own.
    /// - Returns: the new store id.
    /// - Throws: `StoreError`, `SQLiteError`.
    @discardableResult
    public func newIdentity() throws -> String {
        let db = try database()
        let id = UUID().uuidString.lowercased()
        try db.transaction {
            try MirrorState.setMeta(db, .storeID, id)
            try MirrorState.setMeta(db, .storePath, Path.standardized(settings.path))
        }
        return id
    }
}
