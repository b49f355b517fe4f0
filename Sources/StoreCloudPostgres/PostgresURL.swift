import FoundationEssentials
import StoreBase
#if canImport(Glibc)
import Glibc
#endif

/// Turning a libpq connection URL or `key=value` string into something safe to print.
enum PostgresURL {
    /// Whether `text` is a URI that libpq accepts (`postgresql://` or `postgres://`).
    static func isURI(_ text: String) -> Bool {
        text.hasPrefix("postgresql://") || text.hasPrefix("postgres://")
    }

    /// `conninfo` without any password: the `:password` of the URI's user info, a `password` query parameter,
    /// or a `password=` keyword. Everything else (host, database, `sslmode`, ...) is kept as written.
    ///
    ///     redacted("postgres://alice:s3cret@db.example.com/notes?sslmode=require")
    ///     // "postgres://alice@db.example.com/notes?sslmode=require"
    static func redacted(_ conninfo: String) -> String {
        if isURI(conninfo) { return redactedURI(conninfo) }
        guard let options = try? PGConnInfo.parse(conninfo) else {
            // Unparseable: show nothing of it that could hold a secret.
            return conninfo.contains("password") ? "<connection string with a password>" : conninfo
        }
        return options.filter { $0.key != "password" }.sorted { $0.key < $1.key }
            .map { "\($0.key)=\(quotedValue($0.value))" }.joined(separator: " ")
    }

    private static func redactedURI(_ uri: String) -> String {
        guard let schemeEnd = uri.firstRange(of: "://") else { return uri }
        let scheme = uri[..<schemeEnd.upperBound]
        let rest = uri[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        var authority = String(rest[..<authorityEnd])
        var tail = String(rest[authorityEnd...])
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            let user = userInfo.firstIndex(of: ":").map { userInfo[..<$0] } ?? userInfo
            authority = String(user) + String(authority[at...])
        }
        if let q = tail.firstIndex(of: "?") {
            let path = tail[..<q]
            let kept = tail[tail.index(after: q)...].split(separator: "&", omittingEmptySubsequences: false)
                .filter { item in
                    let key = item.split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
                    return (PercentEncoding.decoded(key) ?? key) != "password"
                }
            tail = String(path) + (kept.isEmpty ? "" : "?" + kept.joined(separator: "&"))
        }
        return String(scheme) + authority + tail
    }

    private static func quotedValue(_ value: String) -> String {
        if !value.isEmpty, !value.contains(where: { $0 == " " || $0 == "'" || $0 == "\\" }) { return value }
        return "'" + value.replacingText("\\", with: "\\\\").replacingText("'", with: "\\'") + "'"
    }
}
