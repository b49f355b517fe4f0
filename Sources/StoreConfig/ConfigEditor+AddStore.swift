import StoreBase

extension ConfigEditor {
    /// `config.yaml` with a new store `name` that is a copy of store `like`'s section as written (comments,
    /// `${VAR}` references and quoting kept), placed after the last store, with its `path` set to `path`.
    ///
    ///     let text = try ConfigEditor.addingStore(to: bytes, name: "laptop", like: "notes",
    ///                                             path: "data/laptop.sqlite", displayPath: "config.yaml")
    ///
    /// - Throws: `StoreError` 64 when `like` is not a store or `name` already is; 78 when `stores:` is written
    ///   in flow style (`{...}`), which this edit does not rewrite.
    public static func addingStore(to bytes: [UInt8], name: String, like: String, path: String,
                                   displayPath: String) throws -> [UInt8]
    {
        let document = try YAMLParser.parse(bytes, displayPath: displayPath)
        guard let stores = document.root?["stores"], let pairs = stores.pairs else {
            throw StoreError(.config, "\(displayPath) has no stores: section to add a store to")
        }
        let names = pairs.compactMap(\.key.scalar)
        guard let source = pairs.first(where: { $0.key.scalar == like }) else {
            throw StoreError(.usage, "no store named '\(like)' in \(displayPath)",
                             hint: Suggest.closest(like, in: names).map { "did you mean '\($0)'?" }
                                 ?? "the stores are: " + names.joined(separator: ", "))
        }
        guard !names.contains(name) else {
            throw StoreError(.usage, "\(displayPath) already has a store named '\(name)'",
                             hint: "choose another name; the stores are: " + names.joined(separator: ", "))
        }
        guard !stores.isFlow, !source.value.isFlow, let last = pairs.last else {
            throw StoreError(.config, "the stores: of \(displayPath) are written in flow style ({...})",
                             hint: "add the store by hand, or rewrite stores: in block style")
        }
        func lineStart(_ offset: Int) -> Int {
            var i = offset
            while i > 0 && bytes[i - 1] != UInt8(ascii: "\n") { i -= 1 }
            return i
        }
        func lineEnd(_ offset: Int) -> Int {
            var i = max(offset, 0)
            if i > 0 && i <= bytes.count && bytes[i - 1] == UInt8(ascii: "\n") { return i }
            while i < bytes.count && bytes[i] != UInt8(ascii: "\n") { i += 1 }
            return min(i + 1, bytes.count)
        }
        // The source store's lines, from its key to the end of its value, with the key renamed.
        let blockStart = lineStart(source.key.sourceRange.lowerBound)
        let blockEnd = lineEnd(source.value.sourceRange.upperBound)
        var block = Array(bytes[blockStart..<source.key.sourceRange.lowerBound])
        let key = YAMLQuoting.isSafePlain(name, flow: false) ? name : YAMLQuoting.doubleQuoted(name)
        block += Array(key.utf8)
        block += Array(bytes[source.key.sourceRange.upperBound..<blockEnd])
        if block.last != UInt8(ascii: "\n") { block.append(UInt8(ascii: "\n")) }
        let insertAt = lineEnd(last.value.sourceRange.upperBound)
        var out = Array(bytes[..<insertAt])
        if out.last != UInt8(ascii: "\n") { out.append(UInt8(ascii: "\n")) }
        out += block
        out += bytes[insertAt...]
        out = try render(bytes: out, key: "stores.\(name).path", value: path, displayPath: displayPath).bytes
        // A new store starts local: switching it is 'storectl mode cloud', which checks the account and syncs.
        if source.value["mode"] != nil {
            out = try render(bytes: out, key: "stores.\(name).mode", value: "local", displayPath: displayPath).bytes
        }
        return out
    }
}
