import FoundationEssentials
import StoreBase
import StoreCloud
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wakes a watcher as soon as another device saves to the container: `LISTEN` on the container's channel.
///
/// Every save to a PostgreSQL container sends `pg_notify(channel, {"zone", "device", "epoch", "seq"})` in its own
/// transaction, so the notification arrives when the save commits (and never for a save that rolled back). The
/// channel is the container's schema name. A notification only says "look now": the change feed stays the truth,
/// and a watcher still polls at its interval, so a lost notification (a dropped connection) costs one interval.
///
/// The listener holds its own connection, apart from the one that syncs. Not Sendable: one owner at a time.
///
///     let listener = try cloud.changeListener()
///     let wakes = try listener.wait(timeout: 0.2, excludingDevice: storeID)
public final class PostgresChangeListener {
    private let connection: PGConnection
    /// The channel listened on: the container's schema name.
    public let channel: String
    private let displayURL: String

    init(connection: PGConnection, channel: String, displayURL: String) throws {
        self.connection = connection
        self.channel = channel
        self.displayURL = displayURL
        do {
            try connection.execute("LISTEN \(PostgresSchema.quoted(channel))")
        } catch let error as PGError {
            throw CloudError(.temporary, "cannot listen for changes on \(displayURL): \(error)",
                             hint: "retry later; nothing was lost")
        }
    }

    /// The statement a save adds to its transaction to wake the listeners of `channel`: the zone, the saving
    /// device, and the zone's epoch and last seq as the save left them (read under the zone's lock, which the
    /// save holds), so that a listener that already has that seq starts no round.
    static func notifyQuery(channel: String, schema: String, zone: String, device: String) -> PGQuery {
        PGQuery("""
            SELECT pg_notify($1, json_build_object('zone', $2::text, 'device', $3::text, 'epoch', z.epoch,
                                                   'seq', z.last_seq)::text)
            FROM \(schema).zones z WHERE z.name = $2
            """, [channel, zone, device])
    }

    /// One save another device made, as its notification tells it.
    public struct Wake: Sendable, Equatable {
        public var zone: String
        /// Where the save left the zone; nil from a notification that does not say (an older storectl's).
        public var token: ServerChangeToken?

        public init(zone: String, token: ServerChangeToken?) {
            self.zone = zone
            self.token = token
        }

        /// Whether a store whose server token is `known` has anything to fetch after this save: a save at or
        /// before its token (in the same epoch) brought it nothing new. Another epoch, or no token on either side,
        /// always does.
        public func isNew(after known: ServerChangeToken?) -> Bool {
            guard let token, let known, token.epoch == known.epoch else { return true }
            return token.seq > known.seq
        }
    }

    private struct Payload: Decodable {
        var zone: String
        var device: String?
        var epoch: String?
        var seq: Int64?
    }

    /// Waits up to `timeout` seconds for notifications, and returns the saves that devices other than
    /// `excludingDevice` made (empty when the time ran out first).
    /// - Throws: `CloudError(.temporary)` when the connection was lost; make a new listener then.
    public func wait(timeout: Double, excludingDevice: String?) throws -> [Wake] {
        var wakes: [Wake] = []
        try collect(into: &wakes, excludingDevice: excludingDevice)
        if !wakes.isEmpty { return wakes }
        var fd = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
        let ready = poll(&fd, 1, Int32(max(0, timeout) * 1000))
        if ready > 0 { try collect(into: &wakes, excludingDevice: excludingDevice) }
        return wakes
    }

    private func collect(into wakes: inout [Wake], excludingDevice: String?) throws {
        let received: [(channel: String, payload: String)]
        do {
            received = try connection.notifications()
        } catch let error as PGError {
            throw CloudError(.temporary, "lost the connection that listens for changes on \(displayURL): \(error)",
                             hint: "retry later; nothing was lost")
        }
        for note in received where note.channel == channel {
            guard let payload = try? JSONDecoder().decode(Payload.self, from: Data(note.payload.utf8)) else { continue }
            if let excludingDevice, payload.device == excludingDevice { continue }
            let token = payload.epoch.flatMap { epoch in payload.seq.map { ServerChangeToken(epoch: epoch, seq: $0) } }
            wakes.append(Wake(zone: payload.zone, token: token))
        }
    }
}

extension PostgresCloudDatabase {
    /// A listener on this container's channel, on a connection of its own.
    /// - Throws: `CloudError` when the server cannot be reached.
    public func changeListener() throws -> PostgresChangeListener {
        let c: PGConnection
        do {
            c = try connect()
        } catch let error as PGError {
            throw cloudError(error, "cannot connect to \(displayURL) to listen for changes")
        }
        return try PostgresChangeListener(connection: c, channel: schemaName, displayURL: displayURL)
    }
}
