import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreConfig
import StoreControl

/// The version storectl reports with --version.
public let storectlVersion = "0.1.0"

/// Options every command accepts, before or after the command name.
public struct GlobalOptions: Sendable {
    public var configPath: String?
    public var storeName: String?
    public var json = false
    public var quiet = false
    public var verbose = false
    public var noColor = false
    public var noExpandEnv = false

    static let specs: [OptionSpec] = [
        OptionSpec("config", short: "c", value: "path",
                   help: "The config file (default: $STORECTL_CONFIG, else ./config.yaml, else "
                       + "$XDG_CONFIG_HOME/storectl/config.yaml)."),
        OptionSpec("store", short: "s", value: "name",
                   help: "The store to act on (required when the config has several; status and doctor show all)."),
        OptionSpec("json", help: "Print one stable JSON document on stdout (see docs/json.md)."),
        OptionSpec("quiet", short: "q", help: "Print no notes or progress on stderr."),
        OptionSpec("verbose", short: "v", help: "Print debug log lines on stderr (same as STORECTL_LOG=debug)."),
        OptionSpec("no-color", help: "Never colour the output (NO_COLOR is honoured too)."),
        OptionSpec("no-expand-env", help: "Do not expand ${VAR} references in the config."),
        OptionSpec("help", short: "h", help: "Show help for the command."),
        OptionSpec("version", help: "Print the version of storectl."),
    ]
}

/// Where the config was found, and how.
public struct ConfigLocation: Sendable, Encodable {
    /// The path as the user would write it (relative paths stay relative).
    public var path: String
    /// The absolute path.
    public var absolutePath: String
    /// `option` (--config), `environment` ($STORECTL_CONFIG), `working_directory` (./config.yaml), `xdg`
    /// ($XDG_CONFIG_HOME/storectl/config.yaml) or `none` (no config found: the path is ./config.yaml).
    public var source: String
    /// Whether the file exists.
    public var exists: Bool
    /// Every place looked at, in order.
    public var searched: [String]

    /// Finds the config: --config, else $STORECTL_CONFIG, else ./config.yaml, else
    /// $XDG_CONFIG_HOME/storectl/config.yaml (XDG_CONFIG_HOME defaults to ~/.config).
    static func find(option: String?, environment: [String: String], workingDirectory: String) -> ConfigLocation {
        func absolute(_ p: String) -> String { p.hasPrefix("/") ? p : Path.join(workingDirectory, p) }
        func exists(_ p: String) -> Bool { FileManager.default.fileExists(atPath: absolute(p)) }
        if let option {
            return ConfigLocation(path: option, absolutePath: absolute(option), source: "option",
                                  exists: exists(option), searched: [option])
        }
        if let env = environment["STORECTL_CONFIG"], !env.isEmpty {
            return ConfigLocation(path: env, absolutePath: absolute(env), source: "environment", exists: exists(env),
                                  searched: [env])
        }
        var searched = ["config.yaml"]
        if exists("config.yaml") {
            return ConfigLocation(path: "config.yaml", absolutePath: absolute("config.yaml"),
                                  source: "working_directory", exists: true, searched: searched)
        }
        let xdgHome = environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? environment["HOME"].flatMap { $0.isEmpty ? nil : Path.join($0, ".config") }
        if let xdgHome {
            let xdg = Path.join(xdgHome, "storectl/config.yaml")
            searched.append(xdg)
            if exists(xdg) {
                return ConfigLocation(path: xdg, absolutePath: xdg, source: "xdg", exists: true, searched: searched)
            }
        }
        return ConfigLocation(path: "config.yaml", absolutePath: absolute("config.yaml"), source: "none",
                              exists: false, searched: searched)
    }
}

/// Everything a running command can reach: the global options, the console and the environment.
public final class CommandContext {
    public var global: GlobalOptions
    public let console: Console
    public let environment: [String: String]
    /// The words that named the command, e.g. ["history", "consumer", "add"].
    public var commandPath: [String]
    /// The arguments storectl was run with (without the program name), for hints that repeat the command.
    public var argv: [String] = []
    /// The folder relative paths on the command line resolve against.
    public let workingDirectory: String
    /// Whether the config's warnings were printed already (once per run).
    var warnedAboutConfig = false
    /// The config, once it was read.
    public internal(set) var loadedConfig: Config?
    /// The store the command is acting on, once it is known (errors name it).
    public var activeStore: String?
    /// Debug log lines on stderr (--verbose, STORECTL_LOG=debug).
    public let log: Log
    /// Where the config is.
    public let configLocation: ConfigLocation

    public init(global: GlobalOptions, console: Console, environment: [String: String], commandPath: [String],
                workingDirectory: String)
    {
        self.global = global
        self.console = console
        self.environment = environment
        self.commandPath = commandPath
        self.workingDirectory = workingDirectory
        self.configLocation = ConfigLocation.find(option: global.configPath, environment: environment,
                                                  workingDirectory: workingDirectory)
        self.log = Log(console: console, enabled: global.verbose || environment["STORECTL_LOG"] == "debug")
    }

    /// The config path as the user gave it (or as found). For messages.
    public var configDisplayPath: String { configLocation.path }

    /// The absolute config path.
    public var configPath: String { configLocation.absolutePath }

    /// How the commands storectl prints must be written to work when pasted.
    public var invocation: Invocation {
        let explicit = configLocation.source == "option" || configLocation.source == "environment"
        // The number of stores decides --store: read the config if no command has yet.
        if loadedConfig == nil { _ = try? loadConfig() }
        return Invocation(configArgument: explicit ? configLocation.path : nil,
                          storeCount: loadedConfig?.storeNames.count,
                          commandNames: Set(CommandLineTool.commands.map { $0.name }))
    }

    /// `text` with every command it names written as it must be pasted (see `Invocation.render`).
    public func render(_ text: String, store: String? = nil) -> String {
        invocation.render(text, store: store ?? activeStore ?? global.storeName)
    }

    /// A pasteable command line for `words` (e.g. "sync --reupload") about `store`.
    public func command(_ words: String, store: String? = nil) -> String {
        invocation.command(words, store: store ?? activeStore ?? global.storeName)
    }
}

/// The storectl command line: parses argv, runs a command, prints errors, returns the exit code.
public enum CommandLineTool {
    /// The top-level commands.
    public static var commands: [any Command.Type] { registeredCommands }

    /// Runs storectl with `argv` (without the program name) on the process's own console and environment.
    public static func main(_ argv: [String]) -> ExitCode {
        let environment = processEnvironment()
        return run(argv, console: Console.standard(environment: environment), environment: environment,
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
        var context: CommandContext?
        do {
            defer {
                if global.noColor { console.color = false; console.colorOut = false }
                console.quiet = global.quiet
            }
            let line: ParseResult
            do {
                line = try parse(ArgumentTokenizer.tokenize(argv))
            } catch let failure as ParseFailure {
                (global, command, path) = (failure.reached.global, failure.reached.command, failure.reached.path)
                throw failure.error
            }
            (global, command, path) = (line.global, line.command, line.path)
            let parsed = line.arguments
            if global.noColor { console.color = false; console.colorOut = false }
            console.quiet = global.quiet
            if line.wantsVersion {
                if global.json {
                    console.json(VersionDocument(storectlVersion: storectlVersion))
                } else {
                    console.out("storectl \(storectlVersion)")
                }
                return .ok
            }
            if line.wantsHelp {
                console.out(HelpFormatter.help(for: command, path: path))
                return .ok
            }
            let made = CommandContext(global: global, console: console, environment: environment,
                                      commandPath: path, workingDirectory: workingDirectory)
            made.argv = argv
            context = made
            made.log.debug("command", ["path": (["storectl"] + path).joined(separator: " "),
                                       "config": made.configPath, "config_source": made.configLocation.source])
            let code = try command.run(parsed, made)
            made.log.debug("exit", ["code": String(code.rawValue)])
            return code
        } catch let error as any DiagnosedError {
            let context = context ?? CommandContext(global: global, console: console, environment: environment,
                                                    commandPath: path, workingDirectory: workingDirectory)
            report(error, context: context, command: command, path: path)
            context.log.debug("exit", ["code": String(error.exitCode.rawValue), "kind": error.exitCode.kind])
            return error.exitCode
        } catch {
            console.err("error: internal: \(error)")
            console.err("hint: this is a bug in storectl; please report it with the command you ran")
            if global.json {
                console.json(ErrorDocument(error: WatchErrorBody(code: ExitCode.software.rawValue,
                                                                 kind: ExitCode.software.kind,
                                                                 message: "internal: \(error)", hint: nil, store: nil)))
            }
            return .software
        }
    }

    /// Prints an error on stderr: what and where, its details, ONE hint (with every command in it written as it
    /// must be pasted) and, for a usage error, the usage line of the command. With --json, the error document
    /// goes to stdout too.
    static func report(_ error: any DiagnosedError, context: CommandContext, command: any Command.Type,
                       path: [String])
    {
        let console = context.console
        let store = error.store ?? context.activeStore ?? context.global.storeName
        var hint = error.hint.map { context.render($0, store: store) }
        let isUsage = error.exitCode == .usage
        if isUsage && hint == nil {
            hint = "see '\(context.invocation.command((["help"] + path).joined(separator: " "), store: nil))'"
        }
        console.err((error.location.map { $0 + ": " } ?? "") + console.paint("error:", "31;1") + " "
                    + error.summary)
        for line in error.details { console.err(line) }
        if let hint { console.err(console.paint("hint:", "1") + " " + hint) }
        if isUsage { console.err("usage: " + HelpFormatter.usageLine(for: command, path: path)) }
        if context.global.json {
            console.json(ErrorDocument(error: WatchErrorBody(code: error.exitCode.rawValue, kind: error.exitCode.kind,
                                                             message: error.summary, hint: hint, store: store,
                                                             status: error.accountStatus, location: error.location)))
        }
    }

    /// `{"version": 1, "storectl_version": "..."}` for `--version --json`.
    struct VersionDocument: Encodable {
        var storectlVersion: String
    }

    /// `{"version": 1, "error": {...}}`: every key of the body is always present (null when unknown). The body is
    /// the one `storectl watch` puts in its `error` events.
    struct ErrorDocument: Encodable {
        var error: WatchErrorBody
    }

    /// What the command line says: the global options, the command reached and the words that named it, its
    /// arguments, and whether help or the version was asked for.
    struct ParseResult {
        var global = GlobalOptions()
        var command: any Command.Type = RootCommand.self
        var path: [String] = []
        var arguments = ParsedArguments()
        var wantsHelp = false
        var wantsVersion = false
    }

    /// A usage error met while parsing, with what was read up to it: the error names the usage of the deepest
    /// command reached, and `--json` given before it still applies.
    struct ParseFailure: Error {
        var error: UsageError
        var reached: ParseResult
    }

    /// Reads the tokens into the command and its arguments, in two phases: each token in turn (`readToken`), then
    /// the counts (`checkCounts`).
    /// - Throws: `ParseFailure`.
    static func parse(_ tokens: [ArgumentToken]) throws -> ParseResult {
        var reader = ArgumentReader(tokens: tokens)
        do {
            while reader.i < tokens.count {
                try reader.readToken()
                reader.i += 1
            }
            try reader.checkCounts()
        } catch let error as UsageError {
            throw ParseFailure(error: error, reached: reader.result)
        }
        return reader.result
    }
}

/// The state of one parse: the tokens, the position, and what was read so far.
private struct ArgumentReader {
    let tokens: [ArgumentToken]
    var i = 0
    var sawPositional = false
    var result = CommandLineTool.ParseResult()

    init(tokens: [ArgumentToken]) {
        self.tokens = tokens
        result.arguments = ParsedArguments(declaredBy: RootCommand.self)
    }

    mutating func readToken() throws {
        let token = tokens[i]
        switch token.kind {
        case .value(let word): try readWord(word, token)
        case .long(let name, let attached): try readLong(name, attached, token)
        case .short(let c): try readShort(c, token)
        }
    }

    /// A subcommand's name (while no positional came yet), else a positional argument.
    private mutating func readWord(_ word: String, _ token: ArgumentToken) throws {
        let command = result.command
        let path = result.path
        if !sawPositional, let sub = command.subcommands.first(where: { $0.name == word }) {
            result.command = sub
            result.path.append(word)
            var arguments = ParsedArguments(declaredBy: sub)
            arguments.flags = result.arguments.flags
            arguments.values = result.arguments.values
            result.arguments = arguments
        } else if !sawPositional, !command.subcommands.isEmpty, command.positionalRange.upperBound == 0 {
            let names = command.subcommands.map { $0.name }
            var hint = "run 'storectl \((path + ["--help"]).joined(separator: " "))' to see the commands"
            if let near = Suggest.closest(word, in: names) { hint = "did you mean '\(near)'?" }
            let what = path.isEmpty ? "command" : "subcommand of '\(path.joined(separator: " "))'"
            throw UsageError("unknown \(what) '\(word)' (argument \(token.index + 1))", hint: hint)
        } else {
            sawPositional = true
            result.arguments.positionals.append(word)
        }
    }

    /// `--name` or `--name=value`: a global option, else one of the command's.
    private mutating func readLong(_ name: String, _ attached: String?, _ token: ArgumentToken) throws {
        if let spec = GlobalOptions.specs.first(where: { $0.name == name }) {
            if spec.isFlag {
                if attached != nil { throw UsageError("--\(name) takes no value") }
                applyGlobal(spec, nil)
            } else {
                applyGlobal(spec, try takeValue(spec, attached: attached, display: "--\(name)"))
            }
        } else if let spec = result.command.options.first(where: { $0.name == name }) {
            if spec.isFlag {
                if attached != nil { throw UsageError("--\(name) takes no value") }
                result.arguments.flags.insert(name)
            } else {
                result.arguments.values[name, default: []].append(
                    try takeValue(spec, attached: attached, display: "--\(name)"))
            }
        } else {
            let names = (result.command.options + GlobalOptions.specs).map { $0.name }
            let hint = Suggest.closest(name, in: names).map { "did you mean '--\($0)'?" }
                ?? "run 'storectl \((result.path + ["--help"]).joined(separator: " "))' to see the options"
            throw UsageError("unknown option '--\(name)' (argument \(token.index + 1))", hint: hint)
        }
    }

    /// One letter of `-abc`; a letter that takes a value takes the next argument (`-sNAME` is not supported).
    private mutating func readShort(_ c: Character, _ token: ArgumentToken) throws {
        let all = result.command.options + GlobalOptions.specs
        guard let spec = all.first(where: { $0.short == c }) else {
            throw UsageError("unknown option '-\(c)' (argument \(token.index + 1))",
                             hint: "run 'storectl \((result.path + ["--help"]).joined(separator: " "))' to see the options")
        }
        let isGlobal = GlobalOptions.specs.contains { $0.name == spec.name }
        var value: String?
        if !spec.isFlag { value = try takeValue(spec, attached: nil, display: "-\(c)") }
        if isGlobal {
            applyGlobal(spec, value)
        } else if let value {
            result.arguments.values[spec.name, default: []].append(value)
        } else {
            result.arguments.flags.insert(spec.name)
        }
    }

    private mutating func takeValue(_ spec: OptionSpec, attached: String?, display: String) throws -> String {
        if let attached { return attached }
        if i + 1 < tokens.count, case .value(let v) = tokens[i + 1].kind {
            i += 1
            return v
        }
        throw UsageError("missing value for \(display)",
                         hint: "write \(display) <\((spec.valueName ?? "value").lowercased())>")
    }

    private mutating func applyGlobal(_ spec: OptionSpec, _ value: String?) {
        switch spec.name {
        case "config": result.global.configPath = value
        case "store": result.global.storeName = value
        case "json": result.global.json = true
        case "quiet": result.global.quiet = true
        case "verbose": result.global.verbose = true
        case "no-color": result.global.noColor = true
        case "no-expand-env": result.global.noExpandEnv = true
        case "help": result.wantsHelp = true
        case "version": result.wantsVersion = true
        default: break
        }
    }

    /// The positional count the command takes, and options given more than once that may not be.
    func checkCounts() throws {
        guard !result.wantsHelp && !result.wantsVersion else { return }
        let command = result.command
        let arguments = result.arguments
        let range = command.positionalRange
        if arguments.positionals.count > range.upperBound {
            throw UsageError("unexpected argument '\(arguments.positionals[range.upperBound])'")
        }
        if arguments.positionals.count < range.lowerBound {
            throw UsageError("missing argument: \(command.arguments)")
        }
        for spec in command.options where !spec.repeatable {
            if let values = arguments.values[spec.name], values.count > 1 {
                throw UsageError("--\(spec.name) was given \(values.count) times")
            }
        }
    }
}
