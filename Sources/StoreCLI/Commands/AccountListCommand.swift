import StoreBase
import StoreCloud
import StoreConfig
import StoreControl

/// `storectl account list`: the accounts of a container file.
struct AccountListCommand: Command {
    static let name = "list"
    static let abstract = "List the accounts of the container file."
    static let examples = ["storectl account list", "storectl account list --json"]

    struct Entry: Encodable {
        var id: String
        var role: String
        var disabled: Bool
        var createdAt: String

        enum CodingKeys: String, CodingKey {
            case id, role, disabled
            case createdAt = "created_at"
        }
    }

    struct Output: Encodable {
        var container: String
        var accounts: [Entry]
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let (_, cloud) = try context.cloudSettings()
        let accounts = try administration(cloud, context).listAccounts().map {
            Entry(id: $0.id, role: $0.role, disabled: $0.disabled, createdAt: isoTime($0.createdAt))
        }
        if context.global.json {
            context.console.json(Output(container: cloud.container, accounts: accounts))
            return .ok
        }
        let width = max(2, accounts.map { $0.id.count }.max() ?? 0) + 2
        func pad(_ s: String, _ n: Int) -> String { s.padded(to: max(n, s.count)) }
        context.console.out(pad("ID", width) + pad("ROLE", 8) + pad("STATE", 10) + "CREATED")
        for a in accounts {
            context.console.out(pad(a.id, width) + pad(a.role, 8) + pad(a.disabled ? "disabled" : "enabled", 10)
                                    + a.createdAt)
        }
        return .ok
    }
}
