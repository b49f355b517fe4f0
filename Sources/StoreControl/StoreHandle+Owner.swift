import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreMirror
import StoreSQLite

extension StoreHandle {
    /// On PostgreSQL, refuses to bind to a container that another role owns until the user accepts that owner by
    /// name (`--accept-owner ROLE`), once: a role with CREATE on the database could otherwise create a container id
    /// first and receive every store's rows. The accepted owner is kept in the store's meta; if the owner changes
    /// later, the store asks again.
    /// - Throws: `StoreError` (exit 78) naming the owner and the choice.
    func checkOwner(db: Connection, cloud: any CloudDatabase, settings cloudSettings: CloudSettings,
                    accept: String?) throws
    {
        guard let postgres = cloud as? PostgresCloudDatabase, let (owner, isOwner) = try postgres.ownership(),
              !isOwner
        else { return }
        let accepted = try MirrorState.meta(db, .acceptedOwner)
        if accepted == owner { return }
        let role = postgres.role ?? "?"
        // A participant the container's owner shared the zone with joins that owner's data on purpose.
        let invited = try (cloud as? any CloudSharing)?.zoneAccess(cloudSettings.zone)
        let isParticipant = (invited?.level == .readOnly || invited?.level == .readWrite) && invited?.owner == owner
        guard accept == owner || isParticipant else {
            let wrong = accept.map { " (--accept-owner names \($0))" } ?? ""
            throw StoreError(.config, "container \(cloudSettings.container) at \(postgres.displayURL) is owned by role "
                                 + "\(owner), not by the configured role \(role)\(wrong)",
                             details: ["  another role created it; its owner can read and change every row synced "
                                           + "into it; nothing was synced"],
                             hint: "if role \(owner) may hold this store's data, run again with --accept-owner "
                                 + "\(owner); otherwise ask a database owner to check the container")
        }
        try db.transaction { try MirrorState.setMeta(db, .acceptedOwner, owner) }
    }
}
