import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase

/// The version storectl reports with --version.
public let storectlVersion = "0.1.0"

/// Options every command accepts, before or after the command name.
public struct GlobalOptions: Sendable {
    public var configPath: String?
    public var storeName: String?
    public var json = false
    public var quiet = false
    public var noColor = false
    public var noExpandEnv = false

    static let specs: [OptionSpec] = [
        OptionSpec("config", short: "c", value: "PATH",
                   help: "The config file (default: $STORECTL_CONFIG, else ./config.yaml)."),
        OptionSpec("store", short: "s", value: "NAME", help: "The store to act on (default: the only store)."),
        OptionSpec("json", help: "Print one stable JSON document on stdout."),
        OptionSpec("quiet", short: "q", help: "Print no notes or progress on stderr."),
        OptionSpec("no-color", help: "Never colour the output (NO_COLOR is honoured too)."),
        OptionSpec("no-expand-env", help: "Do not expand ${VAR} references in the config."),
        OptionSpec("help", short: "h", help: "Show help for the command."),
        OptionSpec("version", help: "Print the version of storectl."),
    ]
}

/// Everything a running command can reach: the global options, the console and the environment.
public final class CommandContext {
    public var global: GlobalOptions
    public let console: Console
    public let environment: [String: String]
    /// The words that named the command, e.g. ["history", "consumer", "add"].
    public var commandPath: [String]
    /// The folder relative paths on the command line resolve against.
    public let workingDirectory: String
    /// Whether the config's warnings were printed already (once per run).
    var warnedAboutConfig = false

    public init(global: GlobalOptions, console: Console, environment: [String: String], commandPath: [String],
                workingDirectory: String)
    {
        self.global = global
        self.console = console
        self.environment = environment
        self.commandPath = commandPath
        self.workingDirectory = workingDirectory
    }

    /// The config path as the user gave it: --config, else $STORECTL_CONFIG, else config.yaml. For messages.
    public var configDisplayPath: String {
        global.configPath ?? environment["STORECTL_CONFIG"].flatMap { $0.isEmpty ? nil : $0 } ?? "config.yaml"
    }

    /// The absolute config path.
    public var configPath: String {
        let raw = configDisplayPath
        return raw.hasPrefix("/") ? raw : Path.join(workingDirectory, raw)
    }
}

/// The storectl command line: parses argv, runs a command, prints errors, returns the exit code.
public enum CommandLineTool {
    /// The top-level commands.
    public static var commands: [any Command.Type] { registeredCommands }

    /// Runs storectl with `argv` (without the program name) on the process's own console and environment.
    public static func main(_ argv: [String]) -> ExitCode {
        run(argv, console: Console.standard(), environment: processEnvironment(),
            workingDirectory: currentDirectory())
    }

    /// The process environment, read from `environ` directly: what `ProcessInfo.processInfo.environment` gives,
    /// without starting ProcessInfo in every process (a third of the work of `storectl --version`).
    static func processEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.utf8.firstIndex(of: UInt8(ascii: "=")) {
                let name = String(text[..<equals])
                // The first definition wins, as getenv(3) finds it.
                if result[name] == nil { result[name] = String(text[text.index(after: equals)...]) }
            }
            entry += 1
        }
        return result
    }

    /// The current directory (getcwd(3)), or "." when it cannot be read.
    static func currentDirectory() -> String {
        guard let pointer = getcwd(nil, 0) else { return "." }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// Runs storectl with `argv`, writing to `console`. This is the whole tool; `main.swift` only calls it.
    public static func run(_ argv: [String], console: Console, environment: [String: String],
                           workingDirectory: String) -> ExitCode
    {
        var global = GlobalOptions()
        var path: [String] = []
        var command: any Command.Type = RootCommand.self
        do {
            let tokens = ArgumentTokenizer.tokenize(argv)
            let (parsed, resolved, names, wantsHelp, wantsVersion) = try parse(tokens, argv: argv, global: &global)
            command = resolved
            path = names
            if global.noColor { console.color = false }
            console.quiet = global.quiet
            if wantsVersion {
                if global.json {
                    console.json(["version": storectlVersion])
                } else {
                    console.out("storectl \(storectlVersion)")
                }
                return .ok
            }
            if wantsHelp {
                console.out(HelpFormatter.help(for: command, path: path))
                return .ok
            }
            let context = CommandContext(global: global, console: console, environment: environment,
                                         commandPath: path, workingDirectory: workingDirectory)
            return try command.run(parsed, context)
        } catch let error as UsageError {
            console.err("error: " + error.summary)
            if let hint = error.hint { console.err("hint: " + hint) }
            console.err("usage: " + HelpFormatter.usageLine(for: command, path: path))
            console.err("See 'storectl \((path + ["--help"]).joined(separator: " "))'.")
            if global.json {
                console.json(ErrorDocument(error: .init(code: error.exitCode.rawValue, message: error.summary,
                                                        location: nil, hint: error.hint)))
            }
            return error.exitCode
        } catch let error as any DiagnosedError {
            report(error, console: console, json: global.json)
            return error.exitCode
        } catch {
            console.err("error: internal: \(error)")
            console.err("hint: this is a bug in storectl; please report it with the command you ran")
            return .software
        }
    }

    /// Prints a diagnosed error on stderr (and, with --json, as a JSON document on stdout too).
    static func report(_ error: any DiagnosedError, console: Console, json: Bool) {
        console.err((error.location.map { $0 + ": " } ?? "") + console.paint("error:", "31;1") + " " + error.summary)
        for line in error.details { console.err(line) }
        if let hint = error.hint { console.err("hint: " + hint) }
        if json {
            console.json(ErrorDocument(error: .init(code: error.exitCode.rawValue, message: error.summary,
                                                    location: error.location, hint: error.hint)))
        }
    }

    struct ErrorDocument: Encodable {
        struct Body: Encodable {
            var code: Int32
            var message: String
            var location: String?
            var hint: String?
        }
        var error: Body
    }

    static func parse(_ tokens: [ArgumentToken], argv: [String], global: inout GlobalOptions) throws
        -> (ParsedArguments, any Command.Type, [String], Bool, Bool)
    {
        var command: any Command.Type = RootCommand.self
        var path: [String] = []
        var parsed = ParsedArguments()
        var wantsHelp = false
        var wantsVersion = false
        var i = 0
        var sawPositional = false

        func takeValue(_ spec: OptionSpec, attached: String?, display: String) throws -> String {
            if let attached { return attached }
            if i + 1 < tokens.count, case .value(let v) = tokens[i + 1].kind {
                i += 1
                return v
            }
            throw UsageError("missing value for \(display)", hint: "write \(display) \(spec.valueName ?? "VALUE")")
        }

        func applyGlobal(_ spec: OptionSpec, _ value: String?) {
            switch spec.name {
            case "config": global.configPath = value
            case "store": global.storeName = value
            case "json": global.json = true
            case "quiet": global.quiet = true
            case "no-color": global.noColor = true
            case "no-expand-env": global.noExpandEnv = true
            case "help": wantsHelp = true
            case "version": wantsVersion = true
            default: break
            }
        }

        while i < tokens.count {
            let token = tokens[i]
            switch token.kind {
            case .value(let word):
                if !sawPositional, let sub = command.subcommands.first(where: { $0.name == word }) {
                    command = sub
                    path.append(word)
                } else if !sawPositional, !command.subcommands.isEmpty, command.positionalRange.upperBound == 0 {
                    let names = command.subcommands.map { $0.name }
                    var hint = "run 'storectl \((path + ["--help"]).joined(separator: " "))' to see the commands"
                    if let near = Suggest.closest(word, in: names) { hint = "did you mean '\(near)'?" }
                    let what = path.isEmpty ? "command" : "subcommand of '\(path.joined(separator: " "))'"
                    throw UsageError("unknown \(what) '\(word)' (argument \(token.index + 1))", hint: hint)
                } else {
                    sawPositional = true
                    parsed.positionals.append(word)
                }
            case .long(let name, let attached):
                if let spec = GlobalOptions.specs.first(where: { $0.name == name }) {
                    if spec.isFlag {
                        if attached != nil { throw UsageError("--\(name) takes no value") }
                        applyGlobal(spec, nil)
                    } else {
                        applyGlobal(spec, try takeValue(spec, attached: attached, display: "--\(name)"))
                    }
                } else if let spec = command.options.first(where: { $0.name == name }) {
                    if spec.isFlag {
                        if attached != nil { throw UsageError("--\(name) takes no value") }
                        parsed.flags.insert(name)
                    } else {
                        parsed.values[name, default: []].append(
                            try takeValue(spec, attached: attached, display: "--\(name)"))
                    }
                } else {
                    let names = (command.options + GlobalOptions.specs).map { $0.name }
                    let hint = Suggest.closest(name, in: names).map { "did you mean '--\($0)'?" }
                        ?? "run 'storectl \((path + ["--help"]).joined(separator: " "))' to see the options"
                    throw UsageError("unknown option '--\(name)' (argument \(token.index + 1))", hint: hint)
                }
            case .short(let c):
                let all = command.options + GlobalOptions.specs
                guard let spec = all.first(where: { $0.short == c }) else {
                    throw UsageError("unknown option '-\(c)' (argument \(token.index + 1))",
                                     hint: "run 'storectl \((path + ["--help"]).joined(separator: " "))' to see the options")
                }
                let isGlobal = GlobalOptions.specs.contains { $0.name == spec.name }
                var value: String?
                if !spec.isFlag {
                    // `-sNAME` is not supported; the value is the next argument.
                    value = try takeValue(spec, attached: nil, display: "-\(c)")
                }
                if isGlobal {
                    applyGlobal(spec, value)
                } else if let value {
                    parsed.values[spec.name, default: []].append(value)
                } else {
                    parsed.flags.insert(spec.name)
                }
            }
            i += 1
        }
        if !wantsHelp && !wantsVersion {
            let range = command.positionalRange
            if parsed.positionals.count > range.upperBound {
                let extra = parsed.positionals[range.upperBound]
                throw UsageError("unexpected argument '\(extra)'")
            }
            if parsed.positionals.count < range.lowerBound {
                throw UsageError("missing argument: \(command.arguments)")
            }
            for spec in command.options where !spec.repeatable {
                if let values = parsed.values[spec.name], values.count > 1 {
                    throw UsageError("--\(spec.name) was given \(values.count) times")
                }
            }
        }
        return (parsed, command, path, wantsHelp, wantsVersion)
    }
}
