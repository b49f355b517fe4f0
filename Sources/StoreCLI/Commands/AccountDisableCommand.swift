import StoreBase
import StoreCloud
import Storectl

/// `storectl account disable`: disables an account of a container file.
struct AccountDisableCommand: Command {
    static let name = "disable"
    static let abstract = "Disable an account of the container file (its status becomes restricted)."
    static let arguments = "<id>"
    static let discussion = """
        Only an owner (the configured account) can disable accounts. The last enabled owner cannot be disabled.
        """
    static let examples = ["storectl account disable bob"]
    static let positionalRange: ClosedRange<Int> = 1...1

    struct Output: Encodable {
        var container: String
        var account: String
        var disabled: Bool
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let id = args.positionals[0]
        let (_, cloud) = try context.cloudSettings()
        try administration(cloud).disableAccount(id: id)
        if context.global.json {
            context.console.json(Output(container: cloud.container, account: id, disabled: true))
        } else {
            context.console.out("disabled account '\(id)' of container '\(cloud.container)'")
        }
        return .ok
    }
}
