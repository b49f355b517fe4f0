import StoreBase
import StoreCloud
import StoreControl

/// `storectl account disable|enable|remove <id>`: one change to one account of a container file.
protocol AccountChangeCommand: Command {
    /// The past participle for messages and JSON: disabled, enabled, removed.
    static var done: String { get }
    static func apply(_ admin: any CloudAccountAdministration, id: String) throws
}

/// `{"version": 1, "container": ..., "account": ..., "action": "disabled", "disabled": true}`.
struct AccountChangeOutput: Encodable {
    var container: String
    var account: String
    var action: String

    enum CodingKeys: String, CodingKey { case container, account, action }
    struct Flag: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ s: String) { stringValue = s }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(container, forKey: .container)
        try c.encode(account, forKey: .account)
        try c.encode(action, forKey: .action)
        var flag = encoder.container(keyedBy: Flag.self)
        try flag.encode(true, forKey: Flag(action))
    }
}

extension AccountChangeCommand {
    static var arguments: String { "<id>" }
    static var positionalRange: ClosedRange<Int> { 1...1 }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let id = args.positionals[0]
        let (_, cloud) = try context.cloudSettings()
        try apply(try administration(cloud, context), id: id)
        if context.global.json {
            context.console.json(AccountChangeOutput(container: cloud.container, account: id, action: done))
        } else {
            context.console.out("\(done) account '\(id)' of container '\(cloud.container)'")
        }
        return .ok
    }
}

/// `storectl account disable <id>`.
struct AccountDisableCommand: AccountChangeCommand {
    static let name = "disable"
    static let abstract = "Disable an account of the container file (its status becomes restricted)."
    static let discussion = """
        Only an owner (the configured account) can disable accounts. The last enabled owner cannot be disabled.
        'storectl account enable <id>' undoes it.
        """
    static let examples = ["storectl account disable bob"]
    static let done = "disabled"
    static func apply(_ admin: any CloudAccountAdministration, id: String) throws { try admin.disableAccount(id: id) }
}

/// `storectl account enable <id>`.
struct AccountEnableCommand: AccountChangeCommand {
    static let name = "enable"
    static let abstract = "Enable a disabled account of the container file again."
    static let discussion = "Only an owner (the configured account) can enable accounts. Its secret is unchanged."
    static let examples = ["storectl account enable bob"]
    static let done = "enabled"
    static func apply(_ admin: any CloudAccountAdministration, id: String) throws { try admin.enableAccount(id: id) }
}

/// `storectl account remove <id>`.
struct AccountRemoveCommand: AccountChangeCommand {
    static let name = "remove"
    static let abstract = "Remove an account from the container file (its records stay)."
    static let discussion = """
        Only an owner (the configured account) can remove accounts. The last enabled owner cannot be removed.
        The records the account wrote stay in the container; the id can be added again later with a new secret.
        """
    static let examples = ["storectl account remove bob", "storectl account remove bob --json"]
    static let done = "removed"
    static func apply(_ admin: any CloudAccountAdministration, id: String) throws { try admin.removeAccount(id: id) }
}
