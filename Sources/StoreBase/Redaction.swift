/// Hides passwords in connection strings and in any text that may quote one.
///
/// This is the one place that decides what a printed URL or connection string looks like: `config show`,
/// `config get`, `status --json`, `account status`, errors, hints and traces all go through it. It handles:
///
/// - the password of a URL's user info: `postgres://alice:s3cret@db/notes` → `postgres://alice:<redacted>@db/notes`;
/// - a `password` or `sslpassword` query parameter, its name percent-encoded or not:
///   `postgres://db/notes?password=s3cret` → `postgres://db/notes?password=<redacted>`;
/// - a libpq `key=value` string: `host=db password='it''s' dbname=notes` →
///   `host=db password=<redacted> dbname=notes`.
///
/// Everything else is kept as written, so the user still sees which server and database is meant.
public enum Redaction {
    /// The text that stands in for a secret.
    public static let placeholder = "<redacted>"

    /// The connection keywords whose values are secrets.
    static let secretKeywords: Set<String> = ["password", "sslpassword"]

    /// `conninfo` (a URL or a libpq `key=value` string) with every password replaced by `<redacted>`.
    ///
    ///     Redaction.connectionString("postgres://alice:pw@db/notes?sslmode=require")
    ///     // "postgres://alice:<redacted>@db/notes?sslmode=require"
    public static func connectionString(_ conninfo: String) -> String {
        if let scheme = conninfo.firstRange(of: "://"), isScheme(conninfo[..<scheme.lowerBound]) {
            return redactedURL(conninfo)
        }
        return redactedKeywords(conninfo)
    }

    /// Any text (an error message, a line of a config file, a hint) with every password that a URL or a
    /// `key=value` string in it could hold replaced by `<redacted>`.
    public static func text(_ text: String) -> String {
        guard text.contains("://") || text.contains("%") || containsSecretKeyword(text) else { return text }
        var out = ""
        var rest = Substring(text)
        // Each URL in the text, from its scheme to the first character that cannot be part of it.
        while let scheme = rest.firstRange(of: "://") {
            var start = scheme.lowerBound
            while start > rest.startIndex {
                let before = rest.index(before: start)
                guard isSchemeCharacter(rest[before]) else { break }
                start = before
            }
            guard start < scheme.lowerBound else {
                out += rest[..<scheme.upperBound]
                rest = rest[scheme.upperBound...]
                continue
            }
            let end = rest[scheme.upperBound...].firstIndex(where: { $0.isWhitespace || "'\"<>`".contains($0) })
                ?? rest.endIndex
            out += rest[..<start]
            out += redactedURL(String(rest[start..<end]))
            rest = rest[end...]
        }
        out += rest
        return redactedKeywords(out)
    }

    // MARK: URLs

    /// `url` with its user-info password and its password query parameters replaced.
    static func redactedURL(_ url: String) -> String {
        guard let schemeEnd = url.firstRange(of: "://") else { return url }
        let scheme = url[..<schemeEnd.upperBound]
        let rest = url[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        var authority = String(rest[..<authorityEnd])
        var tail = String(rest[authorityEnd...])
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                authority = String(userInfo[..<colon]) + ":" + placeholder + String(authority[at...])
            }
        }
        if let q = tail.firstIndex(of: "?") {
            let path = tail[..<q]
            var query = tail[tail.index(after: q)...]
            var fragment = ""
            if let hash = query.firstIndex(of: "#") {
                fragment = String(query[hash...])
                query = query[..<hash]
            }
            let items = query.split(separator: "&", omittingEmptySubsequences: false).map { item -> String in
                let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = String(parts[0])
                let decoded = (PercentEncoding.decoded(key) ?? key).lowercased()
                guard secretKeywords.contains(decoded) || secretKeywords.contains(key.lowercased()) else {
                    return String(item)
                }
                return key + "=" + placeholder
            }
            tail = String(path) + "?" + items.joined(separator: "&") + fragment
        }
        return String(scheme) + authority + tail
    }

    private static func isScheme(_ text: Substring) -> Bool {
        guard let first = text.first, first.isASCII, first.isLetter else { return false }
        return text.allSatisfy(isSchemeCharacter)
    }

    private static func isSchemeCharacter(_ c: Character) -> Bool {
        c.isASCII && (c.isLetter || c.isNumber || c == "+" || c == "-" || c == ".")
    }

    // MARK: key=value

    private static func containsSecretKeyword(_ text: String) -> Bool {
        let lower = text.lowercased()
        return secretKeywords.contains { lower.contains($0) }
    }

    /// `text` with the value after every `password =` / `sslpassword =` replaced: a single-quoted value through its
    /// closing quote (libpq's `\'` and `\\` escapes respected), else up to the next space or `&`, with the words
    /// after it up to the next `key=value`.
    static func redactedKeywords(_ text: String) -> String {
        guard containsSecretKeyword(text) else { return text }
        let chars = Array(text)
        var out = ""
        var i = 0
        while i < chars.count {
            guard let keyword = keyword(in: chars, at: i) else {
                out.append(chars[i])
                i += 1
                continue
            }
            var j = i + keyword.count
            while j < chars.count, chars[j] == " " || chars[j] == "\t" { j += 1 }
            guard j < chars.count, chars[j] == "=" else {
                out += String(chars[i..<j])
                i = j
                continue
            }
            j += 1
            while j < chars.count, chars[j] == " " || chars[j] == "\t" { j += 1 }
            out += String(chars[i..<j]) + placeholder
            if j < chars.count, chars[j] == "'" {
                j += 1
                while j < chars.count, chars[j] != "'" {
                    j += chars[j] == "\\" ? 2 : 1
                }
                j += 1
            } else {
                func skipWord() {
                    while j < chars.count, !chars[j].isWhitespace, chars[j] != "&" {
                        j += chars[j] == "\\" ? 2 : 1
                    }
                }
                skipWord()
                // Words after an unquoted password that are not `key=value` settings are most likely the rest of a
                // password that holds spaces: they are hidden too.
                while j < chars.count, chars[j] == " " || chars[j] == "\t" {
                    var k = j
                    while k < chars.count, chars[k] == " " || chars[k] == "\t" { k += 1 }
                    var word = k
                    while word < chars.count, !chars[word].isWhitespace, chars[word] != "=" { word += 1 }
                    guard k < chars.count, word < chars.count ? chars[word] != "=" : true else { break }
                    j = k
                    skipWord()
                }
            }
            i = min(j, chars.count)
        }
        return out
    }

    /// The secret keyword that starts at `i` as a whole word, if any.
    private static func keyword(in chars: [Character], at i: Int) -> String? {
        if i > 0 {
            let before = chars[i - 1]
            if before.isLetter || before.isNumber || before == "_" { return nil }
        }
        for keyword in ["sslpassword", "password"] {
            let k = Array(keyword)
            guard i + k.count <= chars.count else { continue }
            if zip(chars[i..<(i + k.count)], k).allSatisfy({ $0.lowercased() == String($1) }) { return keyword }
        }
        return nil
    }
}
