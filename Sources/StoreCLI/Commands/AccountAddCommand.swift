import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreConfig
import StoreControl

/// `storectl account add`: registers an account in a container file.
struct AccountAddCommand: Command {
    static let name = "add"
    static let abstract = "Register an account in the container file, with a secret."
    static let arguments = "<id>"
    static let discussion = """
        The secret is never an argument (other users could read it in the process list): it is read from the
        environment variable named by --secret-env, else from stdin (asked for, without echo, on a terminal).
        The container keeps only a salted hash of it. Only an owner (the configured account) can add accounts,
        except to a container that has none yet.
        """
    static let examples = [
        "BOB_SECRET=... storectl account add bob --secret-env BOB_SECRET",
        "printf '%s' \"$SECRET\" | storectl account add carol --role owner",
    ]
    static let options = [
        OptionSpec("secret-env", value: "VAR", help: "Read the new account's secret from this environment variable."),
        OptionSpec("role", value: "ROLE", help: "owner or member (default: member)."),
    ]
    static let positionalRange: ClosedRange<Int> = 1...1

    struct Output: Encodable {
        var container: String
        var account: String
        var role: String
        var added: Bool
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let id = args.positionals[0]
        let roleText = args.value("role") ?? AccountRole.member.rawValue
        guard let role = AccountRole(rawValue: roleText) else {
            throw UsageError("--role must be owner or member, got '\(roleText)'")
        }
        let secret = try readSecret(args, context, for: id)
        let (_, cloud) = try context.cloudSettings()
        let admin = try administration(cloud, context)
        try admin.addAccount(id: id, secret: secret, role: role)
        if context.global.json {
            context.console.json(Output(container: cloud.container, account: id, role: role.rawValue, added: true))
        } else {
            context.console.out("added account '\(id)' (\(role.rawValue)) to container '\(cloud.container)'")
        }
        return .ok
    }

    static func readSecret(_ args: ParsedArguments, _ context: CommandContext, for id: String) throws -> String {
        if let variable = args.value("secret-env") {
            guard let value = context.environment[variable], !value.isEmpty else {
                throw UsageError("the environment variable \(variable) named by --secret-env is not set or empty",
                                 hint: "export \(variable) with the secret for account '\(id)'")
            }
            return value
        }
        var secret: String
        if context.stdinIsTerminal {
            secret = context.ask("Secret for account '\(id)': ", hidden: true) ?? ""
        } else {
            secret = String(decoding: StandardStream.readAllInput(), as: UTF8.self)
            while secret.hasSuffix("\n") || secret.hasSuffix("\r") { secret.removeLast() }
        }
        guard !secret.isEmpty else {
            throw UsageError("no secret for account '\(id)'",
                             hint: "pass it on stdin or name an environment variable with --secret-env <var>")
        }
        return secret
    }
}

/// The container's account administration, or an error for a backend that keeps accounts elsewhere.
func administration(_ cloud: CloudSettings, _ context: CommandContext) throws -> any CloudAccountAdministration {
    let db = try CloudConnector.open(settings: cloud, environment: context.environment, createIfMissing: false)
    guard let admin = db as? any CloudAccountAdministration else {
        throw StoreError(.unavailable, "container '\(cloud.container)' does not manage its own accounts",
                         hint: "a PostgreSQL container's accounts are PostgreSQL roles; see 'storectl cloud init "
                             + "--print-grants'")
    }
    return admin
}
