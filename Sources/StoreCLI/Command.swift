import StoreBase

/// A storectl command or command group. One file per command, each holding its options, its `run` and its
/// usage text with examples.
public protocol Command: Sendable {
    /// The word that names it on the command line.
    static var name: String { get }
    /// One line: what it does.
    static var abstract: String { get }
    /// The arguments part of the usage line, e.g. "[local|cloud] [--dry-run]".
    static var arguments: String { get }
    /// More explanation, printed in --help.
    static var discussion: String { get }
    /// Example invocations, printed in --help.
    static var examples: [String] { get }
    /// Options specific to this command.
    static var options: [OptionSpec] { get }
    /// Subcommands; a group with subcommands and no `run` of its own prints help.
    static var subcommands: [any Command.Type] { get }
    /// Whether a group with subcommands also runs on its own (its usage shows `[<subcommand>]`).
    static var runsWithoutSubcommand: Bool { get }
    /// How many positional arguments it takes.
    static var positionalRange: ClosedRange<Int> { get }
    /// Runs the command.
    /// - Throws: any `DiagnosedError`; it is printed and becomes the exit code.
    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode
}

extension Command {
    public static var arguments: String { "" }
    public static var discussion: String { "" }
    public static var examples: [String] { [] }
    public static var options: [OptionSpec] { [] }
    public static var subcommands: [any Command.Type] { [] }
    public static var positionalRange: ClosedRange<Int> { 0...0 }
    public static var runsWithoutSubcommand: Bool { false }
    public static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        context.console.out(HelpFormatter.help(for: self, path: context.commandPath))
        return .ok
    }
}
