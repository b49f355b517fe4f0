import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Named crash points for tests.
///
/// Setting `STORECTL_FAILPOINT=NAME` (or `NAME:N`, meaning "on the Nth hit") makes the process die abruptly
/// with SIGKILL at that exact point, as a `kill -9` would. Nothing is flushed and no cleanup runs.
///
///     Failpoint.hit(.importBeforeCommit)
public enum Failpoint {
    /// Every failpoint storectl has, with what state has and has not changed when it fires.
    public static let all: [(name: String, description: String)] = [
        ("export.before-save", "before a batch of records is saved to the cloud"),
        ("export.after-save", "after a batch is saved to the cloud, before the record map records it"),
        ("export.after-batch-commit", "after the record map recorded a saved batch, before the next batch"),
        ("export.before-commit", "before the local transaction that advances the export token commits"),
        ("export.after-commit", "after the export token advanced"),
        ("import.before-apply", "after changes were fetched, before any is applied locally"),
        ("import.before-commit", "after all fetched changes were applied, before the import transaction commits"),
        ("import.after-commit", "after the import transaction committed"),
        ("mode.after-meta", "after the store meta records the new mode, before config.yaml is edited (between the "
            + "two edits of a mode switch)"),
        ("mode.after-config", "after config.yaml records the new mode, before the command finishes"),
        ("migrate.before-commit", "inside migrate, after the triggers were regenerated, before commit"),
        ("dedupe.before-commit", "inside dedupe, after the losers were deleted, before commit"),
        ("seed.after-marker", "after the seed marker was claimed in the cloud, before rows are inserted"),
        ("seed.before-commit", "after seed rows were inserted, before commit"),
        ("seed.after-commit", "after seed rows were committed, before they are exported"),
        ("config.before-rename", "after the new config file was written and synced, before it replaces the old one"),
        ("move.after-copy", "migrate --to: after the backup into the temporary file, before its integrity check"),
        ("move.after-check", "migrate --to: after the copy passed its check, before it is renamed into place"),
        ("move.after-rename", "migrate --to: after the copy is at the new path, before config.yaml is edited"),
        ("move.after-config", "migrate --to: after config.yaml names the new path, before the old file is fenced"),
        ("move.after-fence", "migrate --to: after the old file refuses writes, before it is removed"),
    ]

    private static let armed: (name: String, count: Int)? = {
        guard let raw = getenv("STORECTL_FAILPOINT").map({ String(cString: $0) }), !raw.isEmpty else { return nil }
        if let colon = raw.lastIndex(of: ":"), let n = Int(raw[raw.index(after: colon)...]), n > 0 {
            return (String(raw[..<colon]), n)
        }
        return (raw, 1)
    }()

    private static let hits = Mutex<[String: Int]>([:])

    /// The description of the failpoint `name`, or nil when there is no such failpoint.
    public static func describe(_ name: String) -> String? {
        all.first { $0.name == name }?.description
    }

    /// Dies with SIGKILL if `name` is armed and this is the armed hit.
    public static func hit(_ name: String) {
        guard let armed, armed.name == name else { return }
        let count: Int = hits.withLock { hits in
            hits[name, default: 0] += 1
            return hits[name, default: 0]
        }
        if count == armed.count {
            kill(getpid(), SIGKILL)
        }
    }
}

