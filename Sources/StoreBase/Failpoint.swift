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
/// `NAME:pause` (or `NAME:N:pause`) pauses the process there instead, with everything it holds still held (an
/// open transaction, a saved batch not yet recorded): it prints `storectl: failpoint NAME paused (pid P)` on
/// stderr and waits until `releasePauses()` is called, which `storectl watch` does when it receives SIGINT or
/// SIGTERM; the process then goes on from that point. `NAME:pause=S` pauses S seconds whatever happens, so that a
/// second signal can arrive while the round is still in progress.
///
///     Failpoint.hit("import.before-commit")
public enum Failpoint {
    /// Every failpoint storectl has, with what state has and has not changed when it fires.
    public static let all: [(name: String, description: String)] = [
        ("export.before-save", "before a batch of records is saved to the cloud"),
        ("export.after-save", "after a batch is saved to the cloud, before the record map records it"),
        ("export.after-batch-commit", "after the record map recorded a saved batch, before the next batch"),
        ("export.before-commit", "before the local transaction that advances the export token commits"),
        ("export.after-commit", "after the export token advanced"),
        ("import.after-fetch", "after a page of changes was fetched and staged, before the next page is fetched "
            + "(the import's write transaction is not open yet)"),
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
        ("move.after-rename", "migrate --to: after the copy is at the new path, before the old file is fenced"),
        ("move.after-config", "migrate --to: after config.yaml names the new path (the old file is fenced), before "
            + "the old file is removed"),
        ("cloud-move.after-final-sync", "migrate --cloud: after the last sync with the old target"),
        ("cloud-move.after-account", "migrate --cloud: after the account was checked on the new target"),
        ("cloud-move.after-export", "migrate --cloud: after the snapshot was exported into the new target, before "
            + "it is verified"),
        ("cloud-move.after-verify", "migrate --cloud: after the new target was verified, before the switch is staged"),
        ("cloud-move.after-stage", "migrate --cloud: after the switch was staged in the store, before config.yaml "
            + "is edited"),
        ("cloud-move.after-config", "migrate --cloud: after config.yaml names the new target, before the switch "
            + "is activated"),
        ("cloud-move.before-activate-commit", "migrate --cloud: inside the transaction that activates the switch"),
        ("switch.after-snapshot", "mode cloud: after the copy of the store was taken, before the account is bound"),
        ("switch.before-restore", "mode cloud: after the content did not verify, before the store is put back"),
        ("schema.before-commit", "migrate --sql: after the SQL ran, the triggers were regenerated and the record "
            + "names kept, before the commit"),
        ("move.after-fence", "migrate --to: after the old file refuses writes, before config.yaml is edited"),
        ("verify.before-fetch", "verify and doctor: after the store's snapshot was taken, before the zone's records "
            + "are fetched (they only read: a kill changes nothing)"),
        ("reseal.after-save", "after a page of the zone's records was saved again sealed (a column added to "
            + "encrypted:, cloud rekey --rotate), before the record map follows their new change tags"),
        ("rekey.after-key", "cloud rekey: after the zone's new key record was saved, before the zone's records are "
            + "sealed again with it (--rotate)"),
    ]

    /// What an armed failpoint does when it fires.
    public enum Action: Equatable, Sendable {
        /// Die with SIGKILL.
        case kill
        /// Wait until `releasePauses()` (nil), or for this many seconds.
        case pause(seconds: Double?)
    }

    /// The failpoint `STORECTL_FAILPOINT` arms, if any: its name, the hit it fires on, and what it does.
    private static let armed: (name: String, count: Int, action: Action)? = {
        guard let raw = getenv("STORECTL_FAILPOINT").map({ String(cString: $0) }), !raw.isEmpty else { return nil }
        return parse(raw)
    }()

    /// Parses `NAME`, `NAME:N`, `NAME:pause`, `NAME:N:pause` or `NAME:pause=S` (and `NAME:pause=S:N`).
    public static func parse(_ raw: String) -> (name: String, count: Int, action: Action) {
        var parts = raw.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        var count = 1
        var action = Action.kill
        while parts.count > 1, let last = parts.last {
            if let n = Int(last), n > 0 {
                count = n
            } else if last == "pause" {
                action = .pause(seconds: nil)
            } else if last.hasPrefix("pause="), let seconds = Double(last.dropFirst("pause=".count)), seconds >= 0 {
                action = .pause(seconds: seconds)
            } else {
                break
            }
            parts.removeLast()
        }
        return (parts.joined(separator: ":"), count, action)
    }

    private static let hits = Mutex<[String: Int]>([:])
    private static let released = Atomic<Bool>(false)

    /// Lets every failpoint paused with `NAME:pause` go on (and those hit later pass without pausing).
    public static func releasePauses() {
        released.store(true, ordering: .sequentiallyConsistent)
    }

    /// The description of the failpoint `name`, or nil when there is no such failpoint.
    public static func describe(_ name: String) -> String? {
        all.first { $0.name == name }?.description
    }

    /// Dies with SIGKILL (or pauses) if `name` is armed and this is the armed hit.
    public static func hit(_ name: String) {
        guard let armed, armed.name == name else { return }
        let count: Int = hits.withLock { hits in
            hits[name, default: 0] += 1
            return hits[name, default: 0]
        }
        guard count == armed.count else { return }
        switch armed.action {
        case .kill:
            kill(getpid(), SIGKILL)
        case .pause(let seconds):
            pause(name, seconds: seconds)
        }
    }

    private static func pause(_ name: String, seconds: Double?) {
        StandardStream.err("storectl: failpoint \(name) paused (pid \(getpid()))\n")
        let step: UInt32 = 10_000  // microseconds
        var waited = 0.0
        while true {
            if let seconds {
                if waited >= seconds { break }
            } else if released.load(ordering: .sequentiallyConsistent) {
                break
            }
            usleep(step)
            waited += Double(step) / 1e6
        }
        StandardStream.err("storectl: failpoint \(name) goes on\n")
    }
}

