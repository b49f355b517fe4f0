import FoundationEssentials
import StoreBase
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Edits one scalar of a config file in place, keeping every other byte: comments, blank lines, key order,
/// quoting and indentation.
///
///     try ConfigEditor.set(path: "/srv/app/config.yaml", displayPath: "config.yaml",
///                          key: "stores.notes.mode", value: "cloud", environment: ProcessInfo.processInfo.environment)
public enum ConfigEditor {
    /// What an edit did.
    public struct Change: Sendable, Equatable {
        /// The dotted key.
        public var key: String
        /// The value as written before (unexpanded), or nil when the key was inserted.
        public var oldValue: String?
        /// The value now written.
        public var newValue: String
        /// The 1-based line of the value in the new text.
        public var line: Int
        /// Whether the key did not exist and was inserted.
        public var inserted: Bool
        /// Whether the file already held this value (nothing was written).
        public var unchanged: Bool
    }

    /// Sets `key` to `value` in the file at `path`, atomically.
    ///
    /// The new text is loaded and validated before anything is written; an invalid result is refused and the file
    /// stays byte-identical. The write keeps the file's permissions.
    /// - Parameters:
    ///   - key: a dotted key, like `stores.notes.mode`.
    ///   - value: the new value, as text; it is quoted in the file as YAML needs.
    ///   - environment: the variables used to validate the result.
    /// - Throws: `StoreError` 64 for a key the schema does not know or that is not a scalar, 66/77 when the file
    ///   cannot be read, `ConfigError` 78 when the file is not valid YAML or the result would not be a valid
    ///   config, 73/74 when it cannot be written.
    @discardableResult
    public static func set(path: String, displayPath: String?, key: String, value: String,
                           environment: [String: String], expandEnvironment: Bool = true) throws -> Change
    {
        var change: Change?
        try edit(path: path, displayPath: displayPath, environment: environment,
                 expandEnvironment: expandEnvironment) { bytes, display in
            let (newBytes, made) = try render(bytes: bytes, key: key, value: value, displayPath: display)
            change = made
            return made.unchanged ? nil : newBytes
        }
        guard let change else { throw StoreError(.software, "config edit of \(key) made no change record") }
        return change
    }

    /// Changes the config file at `path` as ONE edit: `transform` returns the new bytes (nil: no change), which are
    /// validated as a whole config and written atomically, or refused with the file left byte-identical.
    /// - Throws: as `set`, plus what `transform` throws.
    public static func edit(path: String, displayPath: String?, environment: [String: String],
                            expandEnvironment: Bool = true,
                            _ transform: (_ bytes: [UInt8], _ displayPath: String) throws -> [UInt8]?) throws
    {
        let display = displayPath ?? path
        let absolute = ConfigPaths.absolute(path, in: FileManager.default.currentDirectoryPath)
        // Write through a symbolic link to the file it names, rather than replacing the link.
        let target = realpath(absolute, nil).map { pointer -> String in
            defer { free(pointer) }
            return String(cString: pointer)
        } ?? absolute
        // Two edits at once (two `mode` commands on two stores of one config) must both land: each holds the lock
        // from the read to the rename, so the second reads the text the first wrote.
        let lock = try ConfigLock(path: target, displayPath: display)
        defer { lock.release() }
        let bytes = try ConfigLoader.readFile(target, displayPath: display)
        guard let newBytes = try transform(bytes, display) else { return }
        do {
            let edited = try ConfigLoader.load(bytes: newBytes, path: absolute, displayPath: display,
                                               environment: environment, expandEnvironment: expandEnvironment,
                                               isolateStoreErrors: true)
            // A store whose section was already wrong may stay so (an edit of another store must not wait for
            // it); a problem the edit would bring is refused.
            if !edited.config.problems.isEmpty {
                let before = (try? ConfigLoader.load(bytes: bytes, path: absolute, displayPath: display,
                                                     environment: environment, expandEnvironment: expandEnvironment,
                                                     isolateStoreErrors: true))?.config.problems ?? []
                let known = Set(before.map { "\($0.store)\u{0}\($0.error.summary)" })
                let brought = edited.config.problems.first { !known.contains("\($0.store)\u{0}\($0.error.summary)") }
                if let brought { throw brought.error }
            }
        } catch var error as ConfigError {
            // The excerpt shows the text as the edit would write it (its lines may be past the end of the file).
            error.details.append("note: that is \(display) as this edit would write it; \(display) was not changed")
            throw error
        }
        guard access(target, W_OK) == 0 else {
            throw StoreError(.noPermission, "cannot write \(display): \(AtomicFile.errnoText())",
                             hint: "check the file's permissions (ls -l \(display)); it was not changed")
        }
        try AtomicFile.write(newBytes, to: target, beforeRename: { Failpoint.hit("config.before-rename") })
    }

    /// Sets `key` to `value` in `text` and returns the new text. Pure: no file system, no validation of the result
    /// beyond YAML syntax (`set` validates).
    ///
    ///     let (text, change) = try ConfigEditor.render("version: 1\n...", key: "stores.notes.mode", value: "cloud")
    ///
    /// - Throws: as `set`, except for file errors.
    public static func render(_ text: String, key: String, value: String, displayPath: String = "config.yaml") throws
        -> (text: String, change: Change)
    {
        let (bytes, change) = try render(bytes: Array(text.utf8), key: key, value: value, displayPath: displayPath)
        return (String(decoding: bytes, as: UTF8.self), change)
    }

    /// Sets `key` to `value` in UTF-8 `bytes`.
    /// - Throws: as `render(_:key:value:displayPath:)`.
    public static func render(bytes: [UInt8], key: String, value: String, displayPath: String) throws
        -> (bytes: [UInt8], change: Change)
    {
        let components = key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard !components.contains(where: \.isEmpty) else {
            throw StoreError(.usage, "'\(key)' is not a key", hint: "write a dotted key, like stores.notes.mode")
        }
        try checkSchema(components, key: key)
        let document = try YAMLParser.parse(bytes, displayPath: displayPath)
        var edit = Edit(bytes: bytes, document: document, components: components, key: key, value: value,
                        displayPath: displayPath)
        return try edit.run()
    }

    /// Refuses keys the schema does not know, and keys that are not scalars.
    private static func checkSchema(_ components: [String], key: String) throws {
        try ConfigKeys.check(components, key: key)
        switch ConfigSchema.lookup(components) {
        case .unknown:
            return
        case .found(.scalar):
            return
        case .found(.list):
            throw StoreError(.usage, "\(key) is a list; config set changes one scalar value",
                             hint: "edit the list in the config file")
        case .found(.section(let keys)):
            throw StoreError(.usage, "\(key) is a section; config set changes one scalar value",
                             hint: "set one of its keys, like \(key).\(keys.first?.0 ?? "...")")
        case .found(.named(let what, _)):
            throw StoreError(.usage, "\(key) is a section; config set changes one scalar value",
                             hint: "set a key of one \(what), like \(key).<\(what)>....")
        }
    }
}

/// One edit in progress.
private struct Edit {
    let bytes: [UInt8]
    let document: YAMLDocument
    let components: [String]
    let key: String
    let value: String
    let displayPath: String
    /// Quote with double quotes whatever the old style (used when another style did not read back exactly).
    var forceDoubleQuotes = false

    private var source: SourceText { document.source }

    /// The file's line break: CRLF if it uses CRLF, else LF.
    private var lineBreak: [UInt8] {
        for i in bytes.indices where bytes[i] == 0x0A { return i > 0 && bytes[i - 1] == 0x0D ? [0x0D, 0x0A] : [0x0A] }
        return [0x0A]
    }

    private func error(_ node: YAMLNode, _ path: String, _ message: String, hint: String? = nil) -> ConfigError {
        ConfigError(displayPath, source, line: node.start.line, column: node.start.column, keyPath: path, message,
                    hint: hint)
    }

    mutating func run() throws -> (bytes: [UInt8], change: ConfigEditor.Change) {
        let first = try attempt()
        if first.change.unchanged { return first }
        if readsBack(first.bytes) { return finish(first) }
        forceDoubleQuotes = true
        let second = try attempt()
        guard readsBack(second.bytes) else {
            let shown = SourceText.secretKeys.contains(components.last ?? "") ? Redaction.placeholder
                : SourceText.printable(value)
            throw StoreError(.software, "cannot write '\(shown)' for \(key) so that it reads back unchanged",
                             hint: "edit the config file by hand")
        }
        return finish(second)
    }

    /// Whether the edited text parses and holds exactly `value` at the key.
    private func readsBack(_ edited: [UInt8]) -> Bool {
        guard let doc = try? YAMLParser.parse(edited, displayPath: displayPath),
              let node = doc.node(at: components), !node.isImplicitNull else { return false }
        return node.scalar == value && !(node.isNull && node.style == .plain)
    }

    private func finish(_ result: (bytes: [UInt8], change: ConfigEditor.Change)) -> ([UInt8], ConfigEditor.Change) {
        var change = result.change
        if let doc = try? YAMLParser.parse(result.bytes, displayPath: displayPath),
           let node = doc.node(at: components)
        {
            change.line = node.start.line
        }
        return (result.bytes, change)
    }

    private func attempt() throws -> (bytes: [UInt8], change: ConfigEditor.Change) {
        guard let root = document.root else {
            // An empty file: the key goes at the top.
            var out = bytes
            if let last = out.last, last != 0x0A { out += lineBreak }
            out += lines(for: components[...], indent: 0, step: 2)
            return (out, change(old: nil, inserted: true))
        }
        var mapping = root
        var path = ""
        for (index, component) in components.enumerated() {
            guard let pairs = mapping.pairs else {
                throw error(mapping, path, "expected a mapping, got \(mapping.described); cannot set \(key)")
            }
            let childPath = KeyPath.child(path, component)
            guard let pair = pairs.first(where: { $0.key.scalar == component }) else {
                return insert(into: mapping, rest: components[index...])
            }
            if index == components.count - 1 {
                return try replace(pair, in: mapping, path: childPath)
            }
            if pair.value.pairs != nil {
                mapping = pair.value
                path = childPath
                continue
            }
            if pair.value.isImplicitNull, !mapping.isFlow {
                return insert(under: pair, rest: components[(index + 1)...])
            }
            throw error(pair.value, childPath, "expected a mapping, got \(pair.value.described); cannot set \(key)",
                        hint: "edit \(childPath) by hand first")
        }
        throw StoreError(.software, "no key to set")
    }

    private func change(old: String?, inserted: Bool) -> ConfigEditor.Change {
        ConfigEditor.Change(key: key, oldValue: old, newValue: value, line: 0, inserted: inserted,
                            unchanged: !inserted && old == value)
    }

    // MARK: Replacing

    private func replace(_ pair: YAMLPair, in mapping: YAMLNode, path: String) throws
        -> (bytes: [UInt8], change: ConfigEditor.Change)
    {
        let node = pair.value
        if node.isImplicitNull {
            // `key:` with nothing after it: the value goes right after the colon.
            var colon = pair.key.sourceRange.upperBound
            while colon < bytes.count, bytes[colon] != 0x3A { colon += 1 }
            let text = scalarText(preferring: .plain, flow: mapping.isFlow)
            var out = bytes
            out.insert(contentsOf: [0x20] + Array(text.utf8), at: min(colon + 1, out.count))
            return (out, change(old: nil, inserted: false))
        }
        guard let old = node.scalar, let style = node.style else {
            throw error(node, path, "expected a scalar, got \(node.described); cannot set it",
                        hint: "edit \(path) by hand")
        }
        let result = change(old: node.isNull && style == .plain ? nil : old, inserted: false)
        if old == value, !(node.isNull && style == .plain) {
            return (bytes, ConfigEditor.Change(key: key, oldValue: old, newValue: value, line: node.start.line,
                                               inserted: false, unchanged: true))
        }
        let text = scalarText(preferring: style, flow: mapping.isFlow)
        var out = bytes
        out.replaceSubrange(node.sourceRange, with: Array(text.utf8))
        return (out, result)
    }

    // MARK: Inserting

    /// Inserts `rest` (the missing keys, the last one holding the value) at the end of `mapping`.
    private func insert(into mapping: YAMLNode, rest: ArraySlice<String>)
        -> (bytes: [UInt8], change: ConfigEditor.Change)
    {
        var out = bytes
        let pairs = mapping.pairs ?? []
        if mapping.isFlow {
            let text = flowText(for: rest)
            if let last = pairs.last {
                out.insert(contentsOf: Array((", " + text).utf8), at: TreeBuilder.contentEnd(last).offset)
            } else {
                out.insert(contentsOf: Array(text.utf8), at: max(mapping.end.offset - 1, 0))
            }
            return (out, change(old: nil, inserted: true))
        }
        let indent = (pairs.first?.key.start.column ?? 1) - 1
        let after = pairs.last.map { TreeBuilder.contentEnd($0).offset } ?? mapping.end.offset
        out = insertLines(lines(for: rest, indent: indent, step: step), afterLineOf: after, in: out)
        return (out, change(old: nil, inserted: true))
    }

    /// Inserts `rest` under `pair`, whose value is empty (`cloud:` with nothing after it).
    private func insert(under pair: YAMLPair, rest: ArraySlice<String>)
        -> (bytes: [UInt8], change: ConfigEditor.Change)
    {
        let indent = pair.key.start.column - 1 + step
        let out = insertLines(lines(for: rest, indent: indent, step: step), afterLineOf: pair.key.end.offset,
                              in: bytes)
        return (out, change(old: nil, inserted: true))
    }

    /// `text` inserted at the start of the line after the one holding byte `offset`.
    private func insertLines(_ text: [UInt8], afterLineOf offset: Int, in bytes: [UInt8]) -> [UInt8] {
        var out = bytes
        if let newline = bytes[min(offset, bytes.count)...].firstIndex(of: 0x0A) {
            out.insert(contentsOf: text, at: newline + 1)
        } else {
            // The last line has no line break: add one before the new lines, and leave none after them.
            out += lineBreak + text.dropLast(lineBreak.count)
        }
        return out
    }

    /// Block lines for `rest`: one `key:` line per missing mapping, then `key: value`.
    private func lines(for rest: ArraySlice<String>, indent: Int, step: Int) -> [UInt8] {
        var out: [UInt8] = []
        for (depth, component) in rest.enumerated() {
            out += Array(String(repeating: " ", count: indent + depth * step).utf8)
            out += Array(keyText(component).utf8)
            out += [0x3A]
            if depth == rest.count - 1 {
                out += [0x20] + Array(scalarText(preferring: .plain, flow: false).utf8)
            }
            out += lineBreak
        }
        return out
    }

    /// Flow text for `rest`: `a: {b: value}`.
    private func flowText(for rest: ArraySlice<String>) -> String {
        guard let first = rest.first else { return "" }
        if rest.count == 1 { return keyText(first) + ": " + scalarText(preferring: .plain, flow: true) }
        return keyText(first) + ": {" + flowText(for: rest.dropFirst()) + "}"
    }

    /// The indentation step of the file: how far a nested block mapping is indented under its key (default 2).
    private var step: Int {
        func find(_ node: YAMLNode) -> Int? {
            guard let pairs = node.pairs, !node.isFlow else { return nil }
            for pair in pairs {
                if let child = pair.value.pairs?.first, !pair.value.isFlow {
                    let difference = child.key.start.column - pair.key.start.column
                    if difference > 0 { return difference }
                }
                if let found = find(pair.value) { return found }
            }
            return nil
        }
        return document.root.flatMap(find) ?? 2
    }

    // MARK: Quoting

    private func keyText(_ key: String) -> String {
        YAMLQuoting.isSafePlain(key, flow: true) ? key : YAMLQuoting.doubleQuoted(key)
    }

    /// `value` as YAML source, in `preferring` style when the value allows it.
    private func scalarText(preferring style: YAMLScalarStyle, flow: Bool) -> String {
        if forceDoubleQuotes { return YAMLQuoting.doubleQuoted(value) }
        switch style {
        case .plain, .literal, .folded:
            return YAMLQuoting.isSafePlain(value, flow: flow) ? value : YAMLQuoting.doubleQuoted(value)
        case .singleQuoted:
            return YAMLQuoting.canSingleQuote(value) ? YAMLQuoting.singleQuoted(value) : YAMLQuoting.doubleQuoted(value)
        case .doubleQuoted:
            return YAMLQuoting.doubleQuoted(value)
        }
    }
}

/// Writing scalars as YAML source.
enum YAMLQuoting {
    /// Whether `value` can be written as a plain scalar and read back as the same text (and not as null).
    static func isSafePlain(_ value: String, flow: Bool) -> Bool {
        guard let first = value.unicodeScalars.first, let last = value.unicodeScalars.last else { return false }
        if ["~", "null", "Null", "NULL"].contains(value) { return false }
        if " \t".unicodeScalars.contains(first) || " \t".unicodeScalars.contains(last) { return false }
        if "-?:,[]{}#&*!|>'\"%@`".unicodeScalars.contains(first) { return false }
        if value.contains(": ") || value.contains(" #") || value.hasSuffix(":") { return false }
        if flow, value.unicodeScalars.contains(where: { ",[]{}".unicodeScalars.contains($0) }) { return false }
        return value.unicodeScalars.allSatisfy(isPrintable)
    }

    /// Whether `value` can be single-quoted (single quotes cannot hold line breaks or control characters).
    static func canSingleQuote(_ value: String) -> Bool {
        value.unicodeScalars.allSatisfy(isPrintable)
    }

    static func singleQuoted(_ value: String) -> String {
        "'" + value.replacingText("'", with: "''") + "'"
    }

    /// `value` double-quoted, with YAML escapes for `"`, `\` and every non-printable character.
    static func doubleQuoted(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case "\u{85}": out += "\\N"
            case "\u{2028}": out += "\\L"
            case "\u{2029}": out += "\\P"
            default:
                if isPrintable(scalar) {
                    out.unicodeScalars.append(scalar)
                } else if scalar.value <= 0xFF {
                    out += "\\x" + hex(scalar.value, width: 2)
                } else {
                    out += "\\u" + hex(scalar.value, width: 4)
                }
            }
        }
        return out + "\""
    }

    private static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// YAML's printable set, minus the line breaks (c-printable without b-char).
    private static func isPrintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x09, 0x20...0x7E: return true
        case 0xA0...0xD7FF, 0xE000...0xFFFD:
            return scalar.value != 0xFEFF && scalar.value != 0x2028 && scalar.value != 0x2029
        case 0x10000...0x10FFFF: return true
        default: return false
        }
    }
}

/// An exclusive lock on a config file, held while it is read, edited and replaced.
///
/// The lock is `flock` on the file itself, so no lock file is ever left behind. The edit replaces the file by a
/// rename, so a waiter may end up holding the lock of the old, replaced file: after `flock` returns, the lock
/// checks that the path still names the file it locked, and otherwise locks the new one. A lock held by another
/// process longer than `timeout` seconds is exit 75 (retry).
final class ConfigLock {
    /// How long an edit waits for another one.
    static let timeout = 30.0

    private var fd: Int32

    /// Waits for the lock on `path`.
    /// - Throws: `StoreError` 66/77 when the file cannot be opened, 75 when the wait runs out.
    init(path: String, displayPath: String) throws {
        let deadline = Date().timeIntervalSince1970 + Self.timeout
        while true {
            let opened = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            guard opened >= 0 else {
                // Missing or unreadable: readFile gives the precise error.
                _ = try ConfigLoader.readFile(path, displayPath: displayPath)
                throw StoreError(.noInput, "cannot open \(displayPath): \(AtomicFile.errnoText())")
            }
            var locked = false
            while !locked {
                if flock(opened, LOCK_EX | LOCK_NB) == 0 {
                    locked = true
                } else if errno == EWOULDBLOCK || errno == EINTR {
                    guard Date().timeIntervalSince1970 < deadline else {
                        close(opened)
                        throw StoreError(.tempFail, "another storectl process has been editing \(displayPath) for "
                                             + "\(Int(Self.timeout)) seconds", hint: "retry when it has finished")
                    }
                    usleep(2_000)
                } else {
                    // A file system without flock: edit without the lock rather than not at all.
                    locked = true
                }
            }
            var held = stat()
            var current = stat()
            if fstat(opened, &held) == 0, stat(path, &current) == 0, held.st_dev == current.st_dev,
               held.st_ino == current.st_ino
            {
                fd = opened
                return
            }
            // The file was replaced while this process waited: lock the new one.
            close(opened)
        }
    }

    /// Releases the lock (closing the descriptor releases it too, should the process die).
    func release() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
    }

    deinit { release() }
}
