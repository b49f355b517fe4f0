/// The rules every `--json` document of storectl follows, in one place: keys are snake_case, and every document is
/// an object that carries `"version": 1` (see docs/json.md).
public enum JSONContract {
    /// The version of the JSON documents. It changes only when a key is renamed or removed.
    public static let version = 1

    /// A Swift property name as a JSON key: `pendingExport` -> `pending_export`, `storeID` -> `store_id`,
    /// `pendingExportURL` -> `pending_export_url`. Keys that are snake_case already are returned as they are.
    public static func snakeCase(_ name: String) -> String {
        let chars = Array(name)
        guard chars.contains(where: \.isUppercase) else { return name }
        var out = ""
        for (i, c) in chars.enumerated() {
            if c.isUppercase {
                let previous = i > 0 ? chars[i - 1] : nil
                let next = i + 1 < chars.count ? chars[i + 1] : nil
                let startsWord = previous.map { $0.isLowercase || $0.isNumber } ?? false
                let endsAcronym = (previous?.isUppercase ?? false) && (next?.isLowercase ?? false)
                if (startsWord || endsAcronym) && !out.hasSuffix("_") { out.append("_") }
                out += c.lowercased()
            } else {
                out.append(c)
            }
        }
        return out
    }
}

/// A coding key whose name is data (a store name, a table name, a config key as written) rather than a Swift
/// property: the JSON encoder of storectl writes it as it is, never converted to snake_case.
public protocol VerbatimCodingKey: CodingKey {}
