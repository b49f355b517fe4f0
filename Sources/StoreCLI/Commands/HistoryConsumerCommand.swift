import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreHistory
import StoreControl

/// `storectl history consumer`: the registered readers of the history, whose tokens hold it against pruning.
struct HistoryConsumerCommand: Command {
    static let name = "consumer"
    static let abstract = "Add, list and drop history consumers (their tokens hold history against pruning)."
    static let discussion = """
        A consumer is a named reader of the history with a token: the last seq it has processed. Prune removes
        only rows that every consumer has processed. Names starting with 'cloud-' belong to the sync engine
        (cloud-export is its export token): they are listed, and prune respects them, but they cannot be added
        or dropped here.
        """
    static let examples = [
        "storectl history consumer add search-indexer",
        "storectl history consumer list --json",
        "storectl history consumer advance search-indexer 120",
        "storectl history consumer drop search-indexer",
    ]
    static var subcommands: [any Command.Type] {
        [HistoryConsumerAddCommand.self, HistoryConsumerListCommand.self, HistoryConsumerAdvanceCommand.self,
         HistoryConsumerDropCommand.self]
    }

    struct ConsumerOutput: Encodable {
        var name: String
        var token: Int64
        var behind: Int64
        var createdAt: Int64
        var updatedAt: Int64

        enum CodingKeys: String, CodingKey {
            case name, token, behind
            case createdAt = "created_at"
            case updatedAt = "updated_at"
        }

        init(_ c: HistoryConsumer, latest: Int64) {
            name = c.name
            token = c.token
            behind = max(0, latest - c.token)
            createdAt = c.createdAt
            updatedAt = c.updatedAt
        }
    }

    /// The initialized store's tracker.
    static func tracker(_ context: CommandContext) throws -> HistoryTracker {
        let tracker = try context.openStore().historyTracker()
        try tracker.requireInitialized()
        return tracker
    }
}

/// `storectl history consumer add NAME`.
struct HistoryConsumerAddCommand: Command {
    static let name = "add"
    static let abstract = "Register a consumer; it starts at the newest seq unless --token says otherwise."
    static let arguments = "<name>"
    static let positionalRange = 1...1
    static let examples = [
        "storectl history consumer add search-indexer",
        "storectl history consumer add backup --token 0   # hold all existing history too",
    ]
    static let options = [
        OptionSpec("token", value: "TOKEN", help: "The token to start at (default: the newest seq)."),
    ]

    struct Output: Encodable {
        var consumer: HistoryConsumerCommand.ConsumerOutput
        var created: Bool
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let name = args.positionals[0]
        let token = try args.int("token").map(Int64.init)
        if let token, token < 0 { throw UsageError("--token expects a history seq, 0 or more, got \(token)") }
        let tracker = try HistoryConsumerCommand.tracker(context)
        let (consumer, created) = try tracker.addConsumer(name, token: token)
        let latest = try tracker.latestSeq()
        if context.global.json {
            context.console.json(Output(consumer: .init(consumer, latest: latest), created: created))
        } else if created {
            context.console.out("Added consumer '\(name)' at token \(consumer.token).")
        } else {
            context.console.out("Consumer '\(name)' already exists at token \(consumer.token); left unchanged.")
        }
        return .ok
    }
}

/// `storectl history consumer list`.
struct HistoryConsumerListCommand: Command {
    static let name = "list"
    static let abstract = "List the consumers with their tokens and how far behind they are."
    static let examples = ["storectl history consumer list"]

    struct Output: Encodable {
        var consumers: [HistoryConsumerCommand.ConsumerOutput]
        var latestSeq: Int64

        enum CodingKeys: String, CodingKey {
            case consumers
            case latestSeq = "latest_seq"
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let tracker = try HistoryConsumerCommand.tracker(context)
        let latest = try tracker.latestSeq()
        let consumers = try tracker.consumers().map { HistoryConsumerCommand.ConsumerOutput($0, latest: latest) }
        if context.global.json {
            context.console.json(Output(consumers: consumers, latestSeq: latest))
            return .ok
        }
        if consumers.isEmpty {
            context.console.out("No consumers. (newest seq: \(latest))")
            return .ok
        }
        let width = max(4, consumers.map(\.name.count).max() ?? 0) + 2
        context.console.out("NAME".padded(to: width)
                            + "TOKEN".padded(to: 12) + "BEHIND")
        for c in consumers {
            context.console.out(c.name.padded(to: width)
                                + String(c.token).padded(to: 12) + String(c.behind))
        }
        context.console.out("(newest seq: \(latest))")
        return .ok
    }
}

/// `storectl history consumer drop NAME`.
struct HistoryConsumerDropCommand: Command {
    static let name = "drop"
    static let abstract = "Remove a consumer; the history it held can then be pruned."
    static let arguments = "<name>"
    static let positionalRange = 1...1
    static let examples = ["storectl history consumer drop search-indexer"]

    struct Output: Encodable {
        var dropped: String
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let name = args.positionals[0]
        let tracker = try HistoryConsumerCommand.tracker(context)
        guard try tracker.dropConsumer(name) else {
            let names = try tracker.consumers().map(\.name)
            let hint = Suggest.closest(name, in: names).map { "did you mean '\($0)'?" }
                ?? (names.isEmpty ? "there are no consumers" : "the consumers are: " + names.joined(separator: ", "))
            throw StoreError(.usage, "no consumer named '\(name)'", hint: hint)
        }
        if context.global.json {
            context.console.json(Output(dropped: name))
        } else {
            context.console.out("Dropped consumer '\(name)'.")
        }
        return .ok
    }
}

/// `storectl history consumer advance <name> <token>`: the consumer has processed the history up to a token.
struct HistoryConsumerAdvanceCommand: Command {
    static let name = "advance"
    static let abstract = "Move a consumer's token forward: it has processed the history up to there."
    static let arguments = "<name> <token>"
    static let positionalRange = 2...2
    static let discussion = """
        <token> is a history seq (the next_token that 'storectl history --after' printed), or 'latest' for the newest
        seq. A token never moves back. Prune removes only what every consumer has processed, so a consumer that is
        never advanced holds the history forever.
        """
    static let examples = [
        "storectl history consumer advance search-indexer 120",
        "storectl history consumer advance search-indexer latest --json",
        "next=$(storectl history --after 120 --json | jq .next_token) && "
            + "storectl history consumer advance search-indexer \"$next\"",
    ]

    struct Output: Encodable {
        var consumer: HistoryConsumerCommand.ConsumerOutput
        var previousToken: Int64
        var advanced: Bool
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let name = args.positionals[0]
        let raw = args.positionals[1]
        let tracker = try HistoryConsumerCommand.tracker(context)
        let token: Int64
        if raw == "latest" {
            token = try tracker.latestSeq()
        } else if let n = Int64(raw), n >= 0 {
            token = n
        } else {
            throw UsageError("<token> must be a history seq (0 or more) or 'latest', got '\(raw)'")
        }
        let (before, after) = try tracker.advanceConsumer(name, to: token)
        let latest = try tracker.latestSeq()
        if context.global.json {
            context.console.json(Output(consumer: .init(after, latest: latest), previousToken: before.token,
                                        advanced: after.token != before.token))
        } else if after.token == before.token {
            context.console.out("Consumer '\(name)' is already at token \(after.token).")
        } else {
            context.console.out("Advanced consumer '\(name)' from token \(before.token) to \(after.token) "
                                + "(\(Words.count(Int(max(0, latest - after.token)), "change")) behind).")
        }
        return .ok
    }
}
