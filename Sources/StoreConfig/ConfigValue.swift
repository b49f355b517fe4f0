internal import CYAML
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase

/// A config as plain data, for `config show` and `config get`: printed as YAML (by libyaml's emitter) or JSON.
///
/// Secrets are already `<redacted>` in every value built here.
public indirect enum ConfigValue: Sendable, Equatable, Encodable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case list([ConfigValue])
    /// Entries in order (YAML output keeps it; JSON output sorts keys).
    case map([Entry])

    /// One key of a map.
    public struct Entry: Sendable, Equatable {
        public var key: String
        public var value: ConfigValue

        public init(_ key: String, _ value: ConfigValue) {
            self.key = key
            self.value = value
        }
    }

    /// The text that stands in for a secret.
    public static let redacted = "<redacted>"

    /// The value at `components`, walking maps by key.
    public func value(at components: [String]) -> ConfigValue? {
        var current = self
        for component in components {
            guard case .map(let entries) = current, let next = entries.first(where: { $0.key == component }) else {
                return nil
            }
            current = next.value
        }
        return current
    }

    /// The keys of a map, in order.
    public var keys: [String] {
        if case .map(let entries) = self { return entries.map(\.key) }
        return []
    }

    /// A scalar as text (`true`, `0.5`, `notes`); nil for a list or a map.
    public var scalarText: String? {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .double(let d): return String(d)
        case .string(let s): return s
        case .list, .map: return nil
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case .bool(let b): try b.encode(to: encoder)
        case .int(let i): try i.encode(to: encoder)
        case .double(let d): try d.encode(to: encoder)
        case .string(let s): try s.encode(to: encoder)
        case .list(let items): try items.encode(to: encoder)
        case .map(let entries):
            var c = encoder.container(keyedBy: DynamicKey.self)
            for entry in entries { try c.encode(entry.value, forKey: DynamicKey(entry.key)) }
        }
    }

    /// Config keys are data: written as they are.
    private struct DynamicKey: VerbatimCodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ string: String) { stringValue = string }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}

// MARK: Building

extension ConfigValue {
    /// The config with every default explicit and every path absolute (`config show --resolved`).
    public static func resolved(_ config: Config) -> ConfigValue {
        .map([
            Entry("version", .int(config.version)),
            Entry("stores", .map(config.stores.map { Entry($0.name, resolved($0)) })),
        ])
    }

    static func resolved(_ store: StoreSettings) -> ConfigValue {
        var entries = [Entry("path", .string(store.path))]
        if let schema = store.schema { entries.append(Entry("schema", .string(schema))) }
        entries.append(Entry("mode", .string(store.mode.rawValue)))
        var history = [Entry("tracking", .bool(store.history.tracking)), Entry("author", .string(store.history.author))]
        if let retention = store.history.retention { history.append(Entry("retention", .string(retention.text))) }
        entries.append(Entry("history", .map(history)))
        if let cloud = store.cloud {
            var c = [
                Entry("container", .string(cloud.container)),
                Entry("url", .string(Redaction.connectionString(cloud.url))),
            ]
            if let replica = cloud.replicaURL {
                c.append(Entry("replica_url", .string(Redaction.connectionString(replica))))
            }
            c.append(Entry("create_if_missing", .bool(cloud.createIfMissing)))
            c.append(Entry("zone", .string(cloud.zone)))
            if let account = cloud.account { c.append(Entry("account", .string(account))) }
            // A secret that comes from an environment variable shows the variable's name, never its value.
            if let secret = cloud.secret { c.append(Entry("secret", .string(secret.reference ?? redacted))) }
            if let key = cloud.encryptionKey { c.append(Entry("encryption_key", .string(key.reference ?? redacted))) }
            c.append(Entry("merge_policy", .string(cloud.mergePolicy.rawValue)))
            c.append(Entry("max_delete_fraction", .double(cloud.maxDeleteFraction)))
            c.append(Entry("max_delete_count", .int(cloud.maxDeleteCount)))
            c.append(Entry("max_record_size", .int(cloud.maxRecordSize)))
            c.append(Entry("remote_change_notifications", .bool(cloud.remoteChangeNotifications)))
            if let hook = cloud.onRemoteChange { c.append(Entry("on_remote_change", .string(hook))) }
            c.append(Entry("on_remote_change_timeout", .string(cloud.onRemoteChangeTimeout.text)))
            entries.append(Entry("cloud", .map(c)))
        }
        if !store.entities.isEmpty {
            entries.append(Entry("entities", .map(store.entities.map { entity in
                var e: [Entry] = []
                if let unique = entity.unique { e.append(Entry("unique", .list(unique.map(ConfigValue.string)))) }
                if let keep = entity.keep { e.append(Entry("keep", .string(keep.description))) }
                if let tombstone = entity.tombstone {
                    e.append(Entry("tombstone", .list(tombstone.map(ConfigValue.string))))
                }
                if let encrypted = entity.encrypted {
                    e.append(Entry("encrypted", .list(encrypted.map(ConfigValue.string))))
                }
                return Entry(entity.name, .map(e))
            })))
        }
        if let seed = store.seed {
            var s = [Entry("name", .string(seed.name))]
            if let sql = seed.sql { s.append(Entry("sql", .string(sql))) }
            if !seed.rows.isEmpty {
                s.append(Entry("rows", .map(seed.rows.map { table in
                    Entry(table.table, .list(table.rows.map { row in
                        .map(row.map { Entry($0.column, $0.value.map(ConfigValue.string) ?? .null) })
                    }))
                })))
            }
            entries.append(Entry("seed", .map(s)))
        }
        return .map(entries)
    }

    /// The config as written (values expanded unless expansion is off), secrets redacted (`config show`).
    public static func written(_ document: YAMLDocument) -> ConfigValue {
        guard let root = document.root else { return .map([]) }
        return written(root, path: [])
    }

    static func written(_ node: YAMLNode, path: [String]) -> ConfigValue {
        switch node.kind {
        case .scalar(let text, let style):
            if path.count == 4, path[0] == "stores", path[2] == "cloud", (path[3] == "secret" || path[3] == "encryption_key"), !node.isNull {
                return .string(redacted)
            }
            if path.last == "url" || path.last == "replica_url" { return .string(Redaction.connectionString(text)) }
            if let key = path.last, SourceText.secretKeys.contains(key), !node.isNull { return .string(redacted) }
            if node.isNull { return .null }
            guard style == .plain else { return .string(text) }
            return typed(plain: text)
        case .mapping(let pairs):
            return .map(pairs.map { pair in
                let name = pair.key.scalar ?? ""
                return Entry(name, written(pair.value, path: path + [name]))
            })
        case .sequence(let items):
            return .list(items.map { written($0, path: path) })
        }
    }

    /// A plain scalar read with YAML's core schema: booleans, integers, floats, else text.
    static func typed(plain text: String) -> ConfigValue {
        switch text {
        case "true", "True", "TRUE": return .bool(true)
        case "false", "False", "FALSE": return .bool(false)
        default: break
        }
        if let i = Int(text) { return .int(i) }
        if text.contains("."), let d = Double(text), d.isFinite { return .double(d) }
        return .string(text)
    }
}

// MARK: YAML output

extension ConfigValue {
    /// The value as a YAML document, written by libyaml's emitter (which picks quoting as YAML needs it).
    /// - Throws: `StoreError` (exit 70) if the emitter fails.
    public func yaml() throws -> String {
        let emitter = try Emitter()
        try emitter.emit { event in yaml_stream_start_event_initialize(&event, YAML_UTF8_ENCODING) }
        try emitter.emit { event in yaml_document_start_event_initialize(&event, nil, nil, nil, 1) }
        try emit(to: emitter)
        try emitter.emit { event in yaml_document_end_event_initialize(&event, 1) }
        try emitter.emit { event in yaml_stream_end_event_initialize(&event) }
        return emitter.text
    }

    private func emit(to emitter: Emitter) throws {
        switch self {
        case .null: try emitter.scalar("null", style: YAML_PLAIN_SCALAR_STYLE)
        case .bool, .int, .double: try emitter.scalar(scalarText ?? "", style: YAML_PLAIN_SCALAR_STYLE)
        case .string(let s):
            // A string that would read back as another type (true, 1, null) is quoted; else libyaml decides.
            let ambiguous = s.isEmpty || ["~", "null", "Null", "NULL"].contains(s)
                || ConfigValue.typed(plain: s) != .string(s)
            try emitter.scalar(s, style: ambiguous ? YAML_SINGLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE)
        case .list(let items):
            let simple = items.allSatisfy { $0.scalarText != nil }
            try emitter.emit { event in
                yaml_sequence_start_event_initialize(&event, nil, nil, 1,
                                                     simple ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE)
            }
            for item in items { try item.emit(to: emitter) }
            try emitter.emit { event in yaml_sequence_end_event_initialize(&event) }
        case .map(let entries):
            try emitter.emit { event in
                let style = entries.isEmpty ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE
                return yaml_mapping_start_event_initialize(&event, nil, nil, 1, style)
            }
            for entry in entries {
                try ConfigValue.string(entry.key).emit(to: emitter)
                try entry.value.emit(to: emitter)
            }
            try emitter.emit { event in yaml_mapping_end_event_initialize(&event) }
        }
    }
}

/// Owns a libyaml emitter writing into a byte buffer.
private final class Emitter {
    /// Collects the emitter's output; libyaml reaches it through the handler's `data` pointer.
    final class Sink {
        var bytes: [UInt8] = []
    }

    // The emitter struct lives at a fixed heap address: libyaml keeps pointers into it between calls.
    private let emitter: UnsafeMutablePointer<yaml_emitter_t>
    private let sink = Sink()

    init() throws {
        emitter = .allocate(capacity: 1)
        guard yaml_emitter_initialize(emitter) == 1 else {
            emitter.deallocate()
            throw StoreError(.software, "cannot initialize the YAML emitter (out of memory)")
        }
        // "Set a generic output handler. handler: A write handler. data: Any application data for passing to the
        // write handler." (yaml.h, yaml_emitter_set_output). The sink lives as long as this object.
        yaml_emitter_set_output(emitter, { data, buffer, size in
            guard let data, let buffer else { return 0 }
            let sink = Unmanaged<Sink>.fromOpaque(data).takeUnretainedValue()
            sink.bytes.append(contentsOf: UnsafeBufferPointer(start: buffer, count: size))
            return 1
        }, Unmanaged.passUnretained(sink).toOpaque())
        yaml_emitter_set_unicode(emitter, 1)
        yaml_emitter_set_indent(emitter, 2)
        yaml_emitter_set_width(emitter, -1)
    }

    deinit {
        yaml_emitter_delete(emitter)
        emitter.deallocate()
    }

    var text: String { String(decoding: sink.bytes, as: UTF8.self) }

    /// Initializes an event with `make` and emits it.
    /// "The event object is destroyed after the call." (yaml.h, yaml_emitter_emit)
    func emit(_ make: (inout yaml_event_t) -> Int32) throws {
        var event = yaml_event_t()
        guard make(&event) == 1 else { throw StoreError(.software, "cannot build a YAML event (out of memory)") }
        guard yaml_emitter_emit(emitter, &event) == 1 else {
            let problem = emitter.pointee.problem.map { String(cString: $0) } ?? "unknown problem"
            throw StoreError(.software, "cannot write YAML: \(problem)")
        }
    }

    func scalar(_ text: String, style: yaml_scalar_style_t) throws {
        // libyaml asserts that the value pointer is not NULL, even for an empty scalar.
        var bytes = text.isEmpty ? [0] : Array(text.utf8)
        let length = Int32(text.utf8.count)
        try emit { event in
            bytes.withUnsafeMutableBufferPointer { buffer in
                // The scalar is copied into the event, so the buffer need not outlive the call.
                yaml_scalar_event_initialize(&event, nil, nil, buffer.baseAddress, length, 1, 1, style)
            }
        }
    }
}
