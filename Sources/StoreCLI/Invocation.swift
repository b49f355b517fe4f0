import StoreBase

/// How storectl was invoked, so that every command it prints works when pasted: `--config PATH` when the config
/// was not found by default, and `--store NAME` when the config holds more than one store.
///
/// Library errors and reports name commands in plain words (`'storectl sync --reupload'`); this is the one place
/// that turns them into the command to paste (`'storectl --config deploy.yaml --store notes sync --reupload'`).
public struct Invocation: Sendable {
    /// The config path to pass with `--config`, or nil when storectl finds that config without options.
    public var configArgument: String?
    /// The number of stores in the config, when it was read.
    public var storeCount: Int?
    /// The names of the top-level commands (a `storectl` in a text followed by one of them is a command).
    public var commandNames: Set<String>

    public init(configArgument: String?, storeCount: Int?, commandNames: Set<String>) {
        self.configArgument = configArgument
        self.storeCount = storeCount
        self.commandNames = commandNames
    }

    /// The options to put after `storectl` for a command about `store` (nil: about no store in particular).
    public func prefix(store: String?) -> [String] {
        var words: [String] = []
        if let configArgument { words += ["--config", Shell.quoted(configArgument)] }
        if let store, (storeCount ?? 0) > 1 { words += ["--store", Shell.quoted(store)] }
        return words
    }

    /// `argv` without the config option (`--config P`, `--config=P`, `-c P`), which `prefix` puts back once: a
    /// command line rebuilt from what the user typed must not name the config twice. Words after `--` stay.
    public static func withoutConfigOption(_ argv: [String]) -> [String] {
        var out: [String] = []
        var i = 0
        while i < argv.count {
            let word = argv[i]
            if word == "--" {
                out += argv[i...]
                break
            }
            if word == "--config" || word == "-c" {
                i += 2
                continue
            }
            if !word.hasPrefix("--config=") { out.append(word) }
            i += 1
        }
        return out
    }

    /// A pasteable command line: `storectl [--config P] [--store S] words`.
    public func command(_ words: String, store: String?) -> String {
        (["storectl"] + prefix(store: store) + [words]).joined(separator: " ")
    }

    /// `text` with each command it names (`storectl` followed by a command name) given the invocation's options.
    /// Commands that already name a store or a config are left as they are.
    public func render(_ text: String, store: String?) -> String {
        guard !prefix(store: store).isEmpty, text.contains("storectl ") else { return text }
        var out = ""
        var rest = Substring(text)
        while let range = rest.firstRange(of: "storectl ") {
            out += rest[..<range.lowerBound]
            let atWordStart = out.last.map { " '`\"(".contains($0) } ?? true
            out += "storectl "
            rest = rest[range.upperBound...]
            let next = rest.prefix { !" '`\")".contains($0) }
            guard atWordStart, commandNames.contains(String(next)) else { continue }
            let commandText = rest.prefix { !"'`\"".contains($0) }
            var mine: [String] = []
            if let configArgument, !commandText.contains("--config ") {
                mine += ["--config", Shell.quoted(configArgument)]
            }
            if let store, (storeCount ?? 0) > 1, !commandText.contains("--store ") {
                mine += ["--store", Shell.quoted(store)]
            }
            if !mine.isEmpty { out += mine.joined(separator: " ") + " " }
        }
        out += rest
        return out
    }
}

/// POSIX shell quoting for words in printed commands.
public enum Shell {
    /// `word` as the shell reads it back: unchanged when it is plain, else in single quotes.
    ///
    ///     Shell.quoted("notes")        // notes
    ///     Shell.quoted("my notes.yaml") // 'my notes.yaml'
    public static func quoted(_ word: String) -> String {
        let plain = !word.isEmpty && word.unicodeScalars.allSatisfy { c in
            (c.value < 128 && (c.properties.isAlphabetic || ("0"..."9").contains(c))) || "_./:=@%+-,".unicodeScalars.contains(c)
        }
        if plain { return word }
        return "'" + word.replacingText("'", with: "'\\''") + "'"
    }
}
