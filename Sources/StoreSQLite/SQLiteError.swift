internal import CSQLite
import StoreBase

/// An error reported by SQLite, with everything needed to understand it.
public struct SQLiteError: DiagnosedError, Equatable {
    /// The extended result code (`sqlite3_extended_errcode`), e.g. 2067 for SQLITE_CONSTRAINT_UNIQUE.
    public var extendedCode: Int32
    /// SQLite's message (`sqlite3_errmsg`).
    public var message: String
    /// The SQL that failed, when there was one.
    public var sql: String?
    /// The database file, when known.
    public var path: String?

    public init(extendedCode: Int32, message: String, sql: String? = nil, path: String? = nil) {
        self.extendedCode = extendedCode
        self.message = message
        self.sql = sql
        self.path = path
    }

    /// The primary result code: the low byte of the extended code.
    public var primaryCode: Int32 { extendedCode & 0xff }

    /// SQLITE_BUSY or SQLITE_LOCKED: another connection holds a lock beyond the busy timeout.
    public var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
    /// SQLITE_CONSTRAINT and its extended codes.
    public var isConstraint: Bool { primaryCode == SQLITE_CONSTRAINT }
    /// The start of the message a moved store's fence raises on every write to its old file.
    public static let storeMovedPrefix = "storectl: this store moved to "
    /// A write refused by the fence of a store that moved (`migrate --to`) while the writer had the old file open:
    /// a retry, which opens the new path, succeeds.
    public var isStoreMoved: Bool { primaryCode == SQLITE_CONSTRAINT && message.hasPrefix(Self.storeMovedPrefix) }
    /// SQLITE_NOTADB or SQLITE_CORRUPT: the file is not a healthy SQLite database.
    public var isNotADatabase: Bool { primaryCode == SQLITE_NOTADB || primaryCode == SQLITE_CORRUPT }
    /// SQLITE_READONLY and its extended codes.
    public var isReadOnly: Bool { primaryCode == SQLITE_READONLY }
    /// SQLITE_CANTOPEN.
    public var isCantOpen: Bool { primaryCode == SQLITE_CANTOPEN }
    /// SQLITE_FULL: the disk is full.
    public var isFull: Bool { primaryCode == SQLITE_FULL }
    /// SQLITE_CORRUPT and its extended codes: a page of the file is damaged.
    public var isCorrupt: Bool { primaryCode == SQLITE_CORRUPT }
    /// SQLITE_IOERR and its extended codes: the operating system reported an I/O error.
    public var isIOError: Bool { primaryCode == SQLITE_IOERR }

    public var exitCode: ExitCode {
        if isStoreMoved { return .tempFail }
        switch primaryCode {
        case SQLITE_BUSY, SQLITE_LOCKED: return .tempFail
        case SQLITE_NOTADB, SQLITE_CORRUPT, SQLITE_CONSTRAINT, SQLITE_MISMATCH: return .dataError
        case SQLITE_CANTOPEN: return .noInput
        case SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH: return .noPermission
        case SQLITE_IOERR, SQLITE_FULL: return .ioError
        default: return .software
        }
    }

    public var summary: String {
        var s = "SQLite error \(extendedCode): \(message)"
        if let path { s = "\(path): " + s }
        return s
    }

    public var details: [String] {
        guard let sql else { return [] }
        let oneLine = sql.split(whereSeparator: \.isNewline).map { $0.trimmingSpaces() }
            .joined(separator: " ")
        return ["  while executing: " + (oneLine.count > 300 ? String(oneLine.prefix(300)) + "..." : oneLine)]
    }

    public var hint: String? {
        if isStoreMoved {
            return "the store moved while this command ran; run the same command again: config.yaml names the new path"
        }
        switch primaryCode {
        case SQLITE_BUSY, SQLITE_LOCKED: return "another process holds a lock on the database; retry later"
        case SQLITE_NOTADB, SQLITE_CORRUPT: return "the file is not a healthy SQLite database; check the path, or restore it from a backup"
        case SQLITE_READONLY: return "check the permissions of the file and its folder"
        case SQLITE_CANTOPEN: return "check that the file and its folder exist and are accessible"
        case SQLITE_FULL: return "free some disk space and retry; nothing was committed"
        default: return nil
        }
    }
}

import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension SQLiteError {
    /// Whether the error is about the values of one statement (a constraint, a datatype mismatch, a value too
    /// big, an error raised by a trigger) rather than about the database itself (locked, full, damaged,
    /// unreadable): the former concern one record, which can be set aside while the rest goes on.
    public var isAboutValues: Bool {
        if isStoreMoved { return false }
        switch primaryCode {
        case SQLITE_CONSTRAINT, SQLITE_MISMATCH, SQLITE_TOOBIG, SQLITE_RANGE, SQLITE_ERROR: return true
        default: return false
        }
    }
}
