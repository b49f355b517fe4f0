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
/// Every save to a PostgreSQL container sends `pg_notify(channel, {"zone": ..., "device": ...})` in its own
/// transaction, so the notification arrives when the save commits (and never for a save that rolled back). The
/// channel is the container's schema name. A notification only says "look now": the change feed stays the truth,
/// and a watcher still polls at its interval, so a lost notification (a dropped connection) costs one interval.
///
/// The listener holds its own connection, apart from the one that syncs. Not Sendable: one owner at a time.
///
///     let listener = try cloud.changeListener()
///     let zones = try listener.wait(timeout: 0.2, excludingDevice: storeID)
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

    /// The statement a save adds to its transaction to wake the listeners of `channel`.
    static func notifyQuery(channel: String, zone: String, device: String) -> PGQuery {
        PGQuery("SELECT pg_notify($1, json_build_object('zone', $2::text, 'device', $3::text)::text)",
                [channel, zone, device])
    }

    private struct Payload: Decodable {
        var zone: String
        var device: String?
    }

    /// Waits up to `timeout` seconds for notifications, and returns the zones that devices other than
    /// `excludingDevice` saved to (empty when the time ran out first).
    /// - Throws: `CloudError(.temporary)` when the connection was lost; make a new listener then.
    public func wait(timeout: Double, excludingDevice: String?) throws -> Set<String> {
        var zones = Set<String>()
        try collect(into: &zones, excludingDevice: excludingDevice)
        if !zones.isEmpty { return zones }
        var fd = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
        let ready = poll(&fd, 1, Int32(max(0, timeout) * 1000))
        if ready > 0 { try collect(into: &zones, excludingDevice: excludingDevice) }
        return zones
    }

    private func collect(into zones: inout Set<String>, excludingDevice: String?) throws {
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
            zones.insert(payload.zone)
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
