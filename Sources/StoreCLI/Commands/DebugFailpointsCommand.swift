import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase

/// `storectl debug failpoints`: every failpoint, with what has and has not happened when it fires.
struct DebugFailpointsCommand: Command {
    static let name = "failpoints"
    static let abstract = "List every failpoint with its description."
    static let discussion = """
        Each line is a failpoint name and what state has (and has not) changed when it fires. With
        STORECTL_FAILPOINT=NAME the process dies with SIGKILL (exit status 137 in a shell) at the first hit of
        NAME; with NAME:N at the Nth hit. Nothing is flushed and no cleanup runs, as with `kill -9`. With
        NAME:pause the process pauses there instead, until `storectl watch` receives SIGINT or SIGTERM, then goes
        on; NAME:pause=S pauses S seconds (see docs/watch.md).
        """
    static let examples = [
        "storectl debug failpoints",
        "storectl debug failpoints --json",
        "STORECTL_FAILPOINT=import.before-commit storectl sync",
    ]

    struct Entry: Encodable {
        var name: String
        var description: String
    }

    struct Listing: Encodable {
        var failpoints: [Entry]
        /// The failpoint armed by STORECTL_FAILPOINT in this process's environment, if any.
        var armed: String?

        enum CodingKeys: String, CodingKey { case failpoints, armed }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(failpoints, forKey: .failpoints)
            try c.encode(armed, forKey: .armed)
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let entries = Failpoint.all.map { Entry(name: $0.name, description: $0.description) }
        let armed = context.environment["STORECTL_FAILPOINT"].flatMap { $0.isEmpty ? nil : $0 }
        if let armed {
            let name = armed.split(separator: ":").first.map(String.init) ?? armed
            if Failpoint.describe(name) == nil {
                context.console.err("warning: STORECTL_FAILPOINT names '\(name)', which is not a failpoint"
                                    + (Suggest.closest(name, in: entries.map(\.name)).map { "; did you mean '\($0)'?" } ?? ""))
            }
        }
        if context.global.json {
            context.console.json(Listing(failpoints: entries, armed: armed))
            return .ok
        }
        let width = entries.map(\.name.count).max() ?? 0
        for e in entries {
            context.console.out(e.name.padded(to: width) + "  " + e.description)
        }
        return .ok
    }
}
