import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase

/// Expands `${VAR}` and `${VAR:-default}` inside scalar values.
///
/// Only scalar values are expanded, never keys and never the raw text, so a variable's value can hold any
/// character (`:`, `#`, quotes) without changing the YAML structure. `$${` writes a literal `${`.
///
///     ${STORECTL_SECRET}               the variable; an error if it is unset
///     ${STORECTL_SECRET:-demo-secret}  the variable, or `demo-secret` if it is unset or empty
public enum EnvironmentExpansion {
    /// Why a value could not be expanded.
    public enum Failure: Error, Equatable {
        /// `${NAME}` with NAME unset and no default. `offset` is the byte offset of `${` in the value.
        case unset(name: String, offset: Int)
        /// `${` without a closing `}`, or a malformed name.
        case malformed(reference: String, offset: Int)
    }

    /// The expansion of `text`, and whether it held any `${...}` reference.
    /// - Throws: `Failure`.
    public static func expand(_ text: String, environment: [String: String]) throws(Failure)
        -> (value: String, usedReference: Bool)
    {
        let bytes = Array(text.utf8)
        guard bytes.contains(0x24) else { return (text, false) }  // no '$' at all
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var used = false
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b == 0x24, i + 2 < bytes.count, bytes[i + 1] == 0x24, bytes[i + 2] == 0x7B {  // "$${" -> "${"
                out += [0x24, 0x7B]
                i += 3
                continue
            }
            guard b == 0x24, i + 1 < bytes.count, bytes[i + 1] == 0x7B else {  // not "${"
                out.append(b)
                i += 1
                continue
            }
            guard let close = bytes[(i + 2)...].firstIndex(of: 0x7D) else {  // '}'
                throw .malformed(reference: String(decoding: bytes[i...], as: UTF8.self), offset: i)
            }
            let body = Array(bytes[(i + 2)..<close])
            let reference = String(decoding: bytes[i...close], as: UTF8.self)
            var nameBytes = body
            var fallback: [UInt8]?
            if let dash = indexOfDefault(body) {
                nameBytes = Array(body[..<dash])
                fallback = Array(body[(dash + 2)...])
            }
            let name = String(decoding: nameBytes, as: UTF8.self)
            guard isVariableName(nameBytes) else { throw .malformed(reference: reference, offset: i) }
            used = true
            if let value = environment[name], !(value.isEmpty && fallback != nil) {
                out += Array(value.utf8)
            } else if let fallback {
                out += fallback
            } else {
                throw .unset(name: name, offset: i)
            }
            i = close + 1
        }
        return (String(decoding: out, as: UTF8.self), used)
    }

    /// Whether `text` holds a `${...}` reference.
    public static func hasReference(_ text: String) -> Bool {
        text.replacingText("$${", with: "").contains("${")
    }

    private static func indexOfDefault(_ body: [UInt8]) -> Int? {
        guard body.count >= 2 else { return nil }
        for j in 0..<(body.count - 1) where body[j] == 0x3A && body[j + 1] == 0x2D { return j }  // ":-"
        return nil
    }

    private static func isVariableName(_ name: [UInt8]) -> Bool {
        guard let first = name.first else { return false }
        func letter(_ c: UInt8) -> Bool { (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F }
        return letter(first) && name.allSatisfy { letter($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }
}

extension EnvironmentExpansion {
    /// Expands every scalar value in `node` (keys stay as written). Values from references get `fromReference`.
    /// - Throws: `ConfigError` naming the variable, pointing at its `${` in the source when it can be found.
    static func expandValues(in node: YAMLNode, path: String, environment: [String: String], source: SourceText,
                             displayPath: String) throws -> YAMLNode
    {
        var node = node
        switch node.kind {
        case .scalar(let text, let style):
            do throws(Failure) {
                let (value, used) = try expand(text, environment: environment)
                node.kind = .scalar(value, style)
                node.fromReference = used
            } catch {
                let (reference, message, hint): (String, String, String)
                switch error {
                case .unset(let name, let offset):
                    reference = locate(text, offset: offset)
                    message = "environment variable '\(name)' is not set"
                    hint = "set \(name), or give a default: ${\(name):-value}"
                case .malformed(let ref, _):
                    reference = ref
                    message = "malformed variable reference '\(ref)'"
                    hint = "write ${NAME} or ${NAME:-default}; names use letters, digits and '_'; "
                        + "write $${ for a literal ${"
                }
                var mark = node.start
                let sourceBytes = source.bytes[node.sourceRange]
                if let found = firstRange(of: Array(reference.utf8), in: Array(sourceBytes)) {
                    mark = source.mark(ofByte: node.sourceRange.lowerBound + found)
                }
                throw ConfigError(displayPath, source, line: mark.line, column: mark.column, keyPath: path,
                                  message, hint: hint)
            }
        case .mapping(let pairs):
            node.kind = .mapping(try pairs.map { pair in
                YAMLPair(key: pair.key,
                         value: try expandValues(in: pair.value, path: KeyPath.child(path, pair.key.scalar ?? ""),
                                                 environment: environment, source: source, displayPath: displayPath))
            })
        case .sequence(let items):
            node.kind = .sequence(try items.enumerated().map { index, item in
                try expandValues(in: item, path: KeyPath.item(path, index), environment: environment,
                                 source: source, displayPath: displayPath)
            })
        }
        return node
    }

    /// The reference text starting at byte `offset` of `text` (through its `}`).
    private static func locate(_ text: String, offset: Int) -> String {
        let bytes = Array(text.utf8)
        guard offset < bytes.count else { return "${" }
        let end = bytes[offset...].firstIndex(of: 0x7D).map { $0 + 1 } ?? bytes.count
        return String(decoding: bytes[offset..<end], as: UTF8.self)
    }

    private static func firstRange(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard !needle.isEmpty, needle.count <= haystack.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i..<(i + needle.count)].elementsEqual(needle) {
            return i
        }
        return nil
    }
}
