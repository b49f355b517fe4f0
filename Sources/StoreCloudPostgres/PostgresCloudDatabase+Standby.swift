#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud

/// What `storectl status` says of the hot standby (`cloud.replica_url`).
public struct PostgresStandbyStatus: Sendable, Equatable, Codable {
    /// The standby's URL, any password removed.
    public var url: String
    /// `streaming` (a standby that replays the primary), `paused` (its replay is paused), `down` (it cannot be
    /// reached) or `not_a_standby` (`pg_is_in_recovery()` is false: promoted, or another server).
    public var state: String
    /// Whether sync reads the change feed from it now (`streaming` or `paused`: a paused one still serves what
    /// it has replayed, and the primary the rest).
    public var inUse: Bool
    /// Seconds since the last transaction the standby replayed was committed on the primary
    /// (`now() - pg_last_xact_replay_timestamp()`). On an idle primary this grows though nothing is missing: the
    /// seqs behind say whether the store's zone is.
    public var lagSeconds: Double?
    /// How many seqs of the store's zone the primary holds that the standby has not replayed yet.
    public var seqsBehind: Int64?
    /// Why it is not in use.
    public var reason: String?

    public init(url: String, state: String, inUse: Bool, lagSeconds: Double? = nil, seqsBehind: Int64? = nil,
                reason: String? = nil)
    {
        self.url = url
        self.state = state
        self.inUse = inUse
        self.lagSeconds = lagSeconds
        self.seqsBehind = seqsBehind
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case url, state, reason
        case inUse = "in_use"
        case lagSeconds = "lag_seconds"
        case seqsBehind = "seqs_behind"
    }
}

/// Reads from a PostgreSQL hot standby (`cloud.replica_url`).
///
/// Only the change feed (`fetchChanges`) goes to the standby: it is the bulk of what a fleet of stores reads, and
/// its answer carries its own proof of completeness (the zone's `last_seq` in the same snapshot). Everything else
/// stays on the primary: saves, zone locks, markers, device registration, account checks, LISTEN/NOTIFY, and the
/// other reads too (`zoneInfo`, `fetchRecord`, `exportState`, `fetchDeviceRecords`), whose callers compare what
/// they read with what this store has just saved, which a standby may not have replayed yet.
///
/// A page is read on the standby, in one snapshot with the zone's epoch and `last_seq` and `pg_is_in_recovery()`,
/// and used only when all of these hold; otherwise the same page is read on the primary:
///
/// - the server is in recovery: a promoted standby is a server of its own, which may have diverged, so it is
///   never read again by this connection (with a warning);
/// - the zone's epoch is the one the primary gives it (`primaryEpochs`, read by `zoneInfo` at the start of
///   every export and import) and the one of the caller's token: a standby that has not replayed a purge, or
///   that follows another server, is behind, never "the zone was reset";
/// - its `last_seq` is at least the token's seq and the `last_seq` the primary last showed (`primaryLastSeqs`):
///   a round reads at least what the primary held when it started, and a reader never takes a standby that
///   lags for a zone that went back to an older copy (that is read from the primary, by `Mirror.checkZone`).
///
/// Why a page from the standby is complete: the standby replays the primary's WAL in order and its snapshots show
/// a prefix of the primary's commits in WAL order. The saves of a zone pass its row lock one at a time, and each
/// writes its commit record before it releases the lock, so their commit records are in seq order in the WAL: a
/// snapshot on the standby that shows `last_seq` L shows every save with a seq ≤ L, as on the primary.
///
/// A standby that cannot be reached is not tried again for `standbyRetryDelay` seconds; each time it is found down
/// there is one warning (`takeWarnings()`), and the page is read on the primary.
extension PostgresCloudDatabase {
    /// Seconds before a standby that could not be reached is tried again.
    static let standbyRetryDelay = 30.0

    /// Seconds to wait for the standby to answer a connection, unless its URL sets `connect_timeout`: short, since
    /// the primary can answer instead.
    static let standbyConnectTimeout = 3.0

    /// The page on the standby, or nil when it must be read on the primary.
    /// - Throws: `CloudError` from the primary (reading the zone's epoch).
    func fetchChangesFromStandby(zone: String, since token: ServerChangeToken?, limit: Int,
                                 excludingDevice: String?) throws -> ChangeBatch?
    {
        guard let standby else { return nil }
        guard monotonicNow() >= standbyRetryAt else {
            standbyUse.unavailable += 1
            return nil
        }
        if primaryEpochs[zone] == nil || primaryLastSeqs[zone] == nil {
            // What the primary holds is what the standby's page is checked against.
            guard try zoneInfo(zone, countLive: false) != nil else { return nil }
        }
        guard let epoch = primaryEpochs[zone], let primaryLastSeq = primaryLastSeqs[zone] else { return nil }
        let after = token?.seq ?? 0
        let page: ChangePage?
        do {
            let c = try standbyDatabase()
            page = try changePage(c, zone: zone, after: after, limit: limit, excludingDevice: excludingDevice)
        } catch let error as PGError {
            if error.duringConnect || error.connectionLost || standbyConnection?.isHealthy != true {
                standbyConnection = nil
                standbyRetryAt = monotonicNow() + Self.standbyRetryDelay
                warn("the hot standby at \(standby.displayURL) cannot be reached (\(error.message)); the changes of "
                     + "zone \(zone) are read from the primary at \(displayURL), and the standby is tried again in "
                     + "\(Int(Self.standbyRetryDelay)) s; nothing is lost")
                standbyUse.unavailable += 1
            } else if error.sqlState == "3F000" || error.sqlState == "42P01" || error.sqlStateClass == "40" {
                // The container's schema is not replayed yet, or recovery cancelled the query: behind.
                standbyUse.behind += 1
            } else {
                standbyRetryAt = monotonicNow() + Self.standbyRetryDelay
                warn("reading the changes of zone \(zone) on the hot standby at \(standby.displayURL) failed "
                     + "(\(error)); they are read from the primary at \(displayURL)")
                standbyUse.unavailable += 1
            }
            return nil
        }
        guard let page, page.access.access.canRead else {
            standbyUse.behind += 1  // the zone (or the role's share) is not replayed yet
            return nil
        }
        guard page.inRecovery else {
            // Promoted (pg_promote), or never a standby: its rows may differ from the primary's from now on.
            standbyConnection = nil
            standbyRetryAt = .infinity
            warn("\(standby.displayURL) in cloud.replica_url is not a hot standby (pg_is_in_recovery() is false: it "
                 + "was promoted, or is a server of its own), so it is not read as a copy of the primary; the "
                 + "changes are read from the primary at \(displayURL); point cloud.replica_url at a standby of the "
                 + "primary, or remove it")
            standbyUse.unavailable += 1
            return nil
        }
        guard page.epoch == epoch, token.map({ $0.epoch == epoch }) ?? true,
              page.lastSeq >= after, page.lastSeq >= primaryLastSeq
        else {
            standbyUse.behind += 1
            return nil
        }
        standbyUse.pages += 1
        return page.batch(after: after, limit: limit)
    }

    /// The open connection to the standby, opened when needed. The container's meta is not checked there: the
    /// standby holds the primary's own bytes, and the epoch check refuses anything else.
    /// - Throws: `PGError`.
    private func standbyDatabase() throws -> PGConnection {
        if let standbyConnection, standbyConnection.isHealthy { return standbyConnection }
        standbyConnection = nil
        guard let standby else { throw CloudError(.other, "no hot standby is configured") }
        let c = try connect(to: standby.url, timeout: min(timeout, Self.standbyConnectTimeout))
        standbyConnection = c
        return c
    }

    func warn(_ message: String) {
        if !warnings.contains(message) { warnings.append(message) }
    }

    /// The warnings met since the last call, each once; the list is emptied.
    public func takeWarnings() -> [String] {
        defer { warnings = [] }
        return warnings
    }

    /// How the standby served the change feed since the last call; nil without a standby. The counts restart.
    public func takeReplicaUse() -> ReplicaUse? {
        guard standby != nil else { return nil }
        defer { standbyUse = ReplicaUse() }
        return standbyUse
    }

    /// The standby's state for `storectl status`, read on a connection of its own; nil without a standby.
    ///
    /// The lag is `now() - pg_last_xact_replay_timestamp()` on the standby, and the seqs behind compare the zone's
    /// `last_seq` there with the primary's (when the primary answers).
    public func standbyStatus(zone: String) -> PostgresStandbyStatus? {
        guard let standby else { return nil }
        var status = PostgresStandbyStatus(url: standby.displayURL, state: "down", inUse: false)
        let c: PGConnection
        do {
            c = try connect(to: standby.url, timeout: min(timeout, Self.standbyConnectTimeout))
        } catch let error as PGError {
            status.reason = "it cannot be reached (\(error.message)); sync reads from the primary"
            return status
        } catch {
            status.reason = "it cannot be reached (\(error)); sync reads from the primary"
            return status
        }
        do {
            let r = try c.execute("""
                SELECT pg_is_in_recovery(), extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,
                       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END
                """)
            guard r.bool(0, 0) == true else {
                status.state = "not_a_standby"
                status.reason = "pg_is_in_recovery() is false (it was promoted, or is a server of its own); sync "
                    + "reads from the primary"
                return status
            }
            status.state = r.bool(0, 2) == true ? "paused" : "streaming"
            status.inUse = true
            status.lagSeconds = r.double(0, 1).map { max(0, $0) }
            if let there = try? c.execute("SELECT last_seq, epoch FROM \(s).zones WHERE name = $1", [zone]),
               let primary = try? zoneInfo(zone, countLive: false)
            {
                if there.rowCount == 1, there.string(0, 1) == primary.epoch {
                    status.seqsBehind = max(0, primary.lastSeq - (there.int64(0, 0) ?? 0))
                } else {
                    status.seqsBehind = primary.lastSeq
                }
            }
        } catch let error as PGError {
            status.state = "down"
            status.reason = "it cannot be read (\(error.message)); sync reads from the primary"
        } catch {
            status.state = "down"
            status.reason = "it cannot be read (\(error)); sync reads from the primary"
        }
        return status
    }
}
