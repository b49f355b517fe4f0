import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreControl

/// `storectl cloud purge`: deletes every record and marker of the store's zone, after confirmation.
struct CloudPurgeCommand: Command {
    static let name = "purge"
    static let abstract = "Delete every record of the store's zone in the cloud container (asks first)."
    static let discussion = """
        This is the only command that deletes cloud data. The zone gets a new epoch, so every store that syncs
        with it starts over on its next sync and exports its rows again; no store loses local rows because of a
        purge. Without --yes, it asks for the zone name on a terminal, and refuses when stdin is not a terminal.
        Only an owner may purge: an owner account of a container file, or on PostgreSQL the role that owns the
        container's schema (or a role granted it); a member is refused with exit 77, a disabled or unregistered
        account with exit 69.
        """
    static let examples = [
        "storectl cloud purge            # asks you to type the zone name",
        "storectl cloud purge --yes      # for scripts",
    ]
    static let options = [
        OptionSpec("yes", short: "y", help: "Do not ask for confirmation."),
    ]

    struct Output: Encodable {
        var container: String
        var zone: String
        var purged: Bool
        var records: Int64
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let (_, cloud) = try context.cloudSettings()
        let db = try CloudConnector.open(settings: cloud, environment: context.environment, createIfMissing: false)
        guard let zone = try db.zoneInfo(cloud.zone) else {
            if context.global.json {
                context.console.json(Output(container: cloud.container, zone: cloud.zone, purged: false, records: 0))
            } else {
                context.console.out("zone '\(cloud.zone)' does not exist in container '\(cloud.container)'; "
                                        + "nothing to purge")
            }
            return .ok
        }
        if !args.flag("yes") {
            guard context.stdinIsTerminal else {
                throw UsageError("refusing to purge zone '\(cloud.zone)' of container '\(cloud.container)' "
                                     + "without confirmation",
                                 hint: "stdin is not a terminal; add --yes to confirm")
            }
            let answer = context.ask("This deletes \(zone.liveRecords) records and every marker of zone "
                                         + "'\(cloud.zone)' in container '\(cloud.container)' (\(db.displayURL)).\n"
                                         + "Type the zone name to confirm: ")
            guard answer?.trimmingSpaces() == cloud.zone else {
                throw UsageError("purge not confirmed; nothing was deleted")
            }
        }
        try db.purgeZone(cloud.zone)
        if context.global.json {
            context.console.json(Output(container: cloud.container, zone: cloud.zone, purged: true,
                                        records: zone.liveRecords))
        } else {
            context.console.out("purged zone '\(cloud.zone)' of container '\(cloud.container)': "
                                    + "\(zone.liveRecords) records deleted; stores syncing with it start over on "
                                    + "their next sync")
        }
        return .ok
    }
}
