import FoundationEssentials
import StoreBase

/// The rules every `CloudDatabase` backend applies the same way, stated once: what a malformed request is, where
/// a page's token stands, what a change tag looks like, and which container meta is refused. Both backends call
/// these; the conformance suite pins each edge, so that a new backend cannot answer a call differently.
public enum CloudContract {
    // MARK: Requests

    /// Refuses an empty zone name (`ensureZone`): every other call on it would then name a zone nobody can see.
    /// - Throws: `CloudError(.invalid)`.
    public static func checkZone(_ zone: String) throws {
        guard !zone.isEmpty else { throw CloudError(.invalid, "a zone name cannot be empty") }
    }

    /// Refuses an empty device (store) id (`registerDevice`, `save`, `createMarker`): a record saved by nobody
    /// could never be recognised as a device's own write after a crash.
    /// - Throws: `CloudError(.invalid)`.
    public static func checkDevice(_ device: String) throws {
        guard !device.isEmpty else { throw CloudError(.invalid, "a device's store id cannot be empty") }
    }

    /// Refuses a page size below 1 (`fetchChanges`, `fetchDeviceRecords`).
    /// - Throws: `CloudError(.invalid)`.
    public static func checkPageSize(_ limit: Int) throws {
        guard limit > 0 else { throw CloudError(.invalid, "the page size must be at least 1, got \(limit)") }
    }

    /// Refuses a malformed batch before anything of it is written: an empty device id, a record with an empty name
    /// or type, or a record name that appears twice (which of the two would win is undefined, so neither is
    /// saved). Fields that are not a JSON object are refused by each backend's storage, for the whole batch too.
    /// - Throws: `CloudError(.invalid)`.
    public static func checkBatch(_ saves: [RecordSave], zone: String, device: String) throws {
        try checkDevice(device)
        if let bad = saves.first(where: { $0.recordName.isEmpty || $0.recordType.isEmpty }) {
            throw CloudError(.invalid, "a record to save has an empty name or type (name '\(bad.recordName)', "
                                 + "type '\(bad.recordType)'); nothing of the batch was saved")
        }
        // Names are compared as their bytes, as the backends store them: Swift's String equality takes a name's
        // NFC and NFD forms (two keys SQLite holds apart) for one.
        var seen = Set<[UInt8]>()
        seen.reserveCapacity(saves.count)
        for save in saves where !seen.insert(Array(save.recordName.utf8)).inserted {
            throw CloudError(.invalid, "cannot save to zone '\(zone)': record '\(save.recordName)' appears twice in "
                                 + "one batch; nothing of the batch was saved",
                             hint: "save each record at most once per batch")
        }
    }

    // MARK: The change feed

    /// Refuses a token of another epoch of the zone: it was purged or recreated since the token was handed out, and
    /// following the new feed from the old seq would skip records.
    /// - Throws: `CloudError(.zoneReset)`.
    public static func checkToken(_ token: ServerChangeToken?, epoch: String, zone: String, container: String) throws {
        guard let token, token.epoch != epoch else { return }
        throw CloudError(.zoneReset,
                         "zone '\(zone)' of container '\(container)' was purged or recreated since token "
                             + "\(token.rawValue)",
                         hint: "the store must start over with this zone: its local rows are kept and exported "
                             + "again on the next sync")
    }

    /// The token after a page: the last record's seq when more is coming (the page stops there), else the zone's
    /// last seq (a complete page saw everything up to it, records saved again later included), never below
    /// `after`.
    public static func nextToken(epoch: String, after: Int64, zoneLastSeq: Int64, page: [CloudRecord],
                                 moreComing: Bool) -> ServerChangeToken
    {
        let seq = moreComing ? (page.last?.seq ?? after) : max(after, zoneLastSeq)
        return ServerChangeToken(epoch: epoch, seq: seq)
    }

    // MARK: Change tags

    /// The change tag of the record saved with `seq` in a zone of `epoch`: the seq in lowercase hex, `-`, and the
    /// epoch's first 8 characters (`1f-3c9a0b12`). A zone never reuses a seq, and a purge (or a container made
    /// again) gives it a new epoch, so a tag is never handed out twice. Tags are opaque to callers, who only compare
    /// them; a backend that computes them elsewhere (in SQL) must give the same text.
    public static func changeTag(seq: Int64, epoch: String) -> String {
        String(seq, radix: 16) + "-" + epoch.prefix(8)
    }

    /// A tag of a version older than the one tagged `tag`, in the same zone, that no save was ever given (seq 0):
    /// for a record a store knows stands on some older version than the cloud's, without knowing which. A save or
    /// deletion sent with it meets the cloud's version as a conflict, which the merge policy weighs.
    public static func olderTag(than tag: String) -> String {
        "0-" + (tag.firstIndex(of: "-").map { String(tag[tag.index(after: $0)...]) } ?? tag)
    }

    /// The seq a change tag of `changeTag(seq:epoch:)` was made with; nil for a tag of another shape.
    public static func seq(ofTag tag: String) -> Int64? {
        guard let dash = tag.firstIndex(of: "-") else { return nil }
        return Int64(tag[..<dash], radix: 16)
    }

    // MARK: Container meta

    /// Checks what a container says of itself against what the config expects: a format version this storectl
    /// reads, and the container id. `place` names where it is, for messages (a file path, a schema at a URL).
    ///
    /// - Returns: the container's version; one below `newest` is the caller's to upgrade.
    /// - Throws: `CloudError(.notAContainer)`: no version, a newer version than `newest`, or another container.
    @discardableResult
    public static func checkMeta(version: String?, container stored: String?, expected container: String,
                                 newest: Int, place: String) throws -> Int
    {
        guard let text = version, let number = Int(text) else {
            throw CloudError(.notAContainer, "\(place) is not a storectl container (its meta has no version)",
                             hint: "check cloud.url and cloud.container; storectl changed nothing in it")
        }
        guard number <= newest else {
            throw CloudError(.notAContainer,
                             "\(place) is a container of format version \(number), newer than this storectl reads "
                                 + "(\(newest))",
                             hint: "upgrade storectl")
        }
        guard stored == container else {
            throw CloudError(.notAContainer, "\(place) holds container '\(stored ?? "?")', not '\(container)'",
                             hint: "check cloud.container and cloud.url in the config")
        }
        return number
    }
}

// MARK: Schema versions

extension CloudContract {
    /// The markers that hold a zone's schema versions are named with this prefix and the version in ten digits, so
    /// that the newest sorts last (`schema-version/0000000002`).
    public static let schemaMarkerPrefix = "schema-version/"

    /// The marker name of schema version `version`.
    public static func schemaMarkerName(_ version: Int) -> String {
        let digits = String(max(0, version))
        return schemaMarkerPrefix + String(repeating: "0", count: max(0, 10 - digits.count)) + digits
    }

    /// Refuses a schema version a marker name cannot hold, before anything is written.
    /// - Throws: `CloudError(.invalid)`.
    public static func checkSchemaVersion(_ version: Int) throws {
        guard version > 0, version <= 9_999_999_999 else {
            throw CloudError(.invalid, "a zone's schema version must be between 1 and 9999999999, got \(version)")
        }
    }

    /// The marker's payload for a schema version: JSON with its version, file and the file's SHA-256.
    public static func schemaPayload(_ v: ZoneSchemaVersion) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(v)).map { String(decoding: $0, as: UTF8.self) } ?? "{\"version\":\(v.version)}"
    }

    /// The schema version a marker holds; nil when its name or payload is not one (a container written by
    /// something else: the version is then read from the name alone).
    public static func schemaVersion(_ marker: Marker) -> ZoneSchemaVersion? {
        guard marker.name.hasPrefix(schemaMarkerPrefix),
              let version = Int(marker.name.dropFirst(schemaMarkerPrefix.count)), version > 0
        else { return nil }
        var v = (try? JSONDecoder().decode(ZoneSchemaVersion.self, from: Data(marker.payload.utf8)))
            ?? ZoneSchemaVersion(version: version, sha256: "", file: "")
        v.version = version
        v.device = marker.createdBy
        v.at = marker.createdAt
        return v
    }

    /// The refusal of a save written at `writer` into a zone at `zone`.
    public static func schemaAhead(zone: String, container: String, writer: Int, zoneVersion: ZoneSchemaVersion?)
        -> CloudError
    {
        let at = zoneVersion.map { "schema version \($0.version)" } ?? "a later schema version"
        return CloudError(.schemaAhead, "zone '\(zone)' of container '\(container)' is at \(at), and this store is at "
                              + "version \(writer): nothing was saved",
                          hint: "run the same data migration here first ('storectl migrate --sql FILE "
                              + "--schema-version \(zoneVersion?.version ?? writer + 1)'), then sync")
    }
}
