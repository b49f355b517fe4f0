/// Checks a PostgreSQL connection string as the config is read, before anything connects.
///
/// libpq accepts two forms (PostgreSQL documentation, "Connection Strings"): a URI,
/// `postgresql://[userspec@][hostspec][/dbname][?paramspec]`, and a list of `keyword = value` settings
/// (`host=db.example.com dbname=notes sslmode=require`). libpq itself parses the string when storectl connects; this
/// check only makes a malformed one a config error with a position (exit 78) rather than a failed connection later
/// (exit 69). It follows the same grammar: the keywords libpq knows, single quotes with `\'` and `\\` escapes,
/// percent-encoding in URIs, numeric ports, and the values of the enumerated settings.
public enum PostgresConnectionString {
    /// What is wrong with a connection string. Never holds a secret.
    public struct Problem: Error, Equatable, Sendable {
        public var message: String
        public var hint: String

        init(_ message: String, hint: String = "see the PostgreSQL documentation, \"Connection Strings\"") {
            self.message = message
            self.hint = hint
        }
    }

    /// The keywords libpq 14 to 17 accept (`ssl` only in URIs, as a synonym for `sslmode=require`).
    static let keywords: Set<String> = [
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding", "connect_timeout",
        "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
        "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
        "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
        "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "require_auth", "ssl_min_protocol_version",
        "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs",
        "load_balance_hosts", "sslnegotiation",
    ]

    /// The settings whose value is one of a fixed list.
    static let choices: [String: [String]] = [
        "sslmode": ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"],
        "gssencmode": ["disable", "prefer", "require"],
        "channel_binding": ["disable", "prefer", "require"],
        "target_session_attrs": ["any", "read-write", "read-only", "primary", "standby", "prefer-standby"],
        "load_balance_hosts": ["disable", "random"],
        "sslnegotiation": ["postgres", "direct"],
    ]

    /// The settings whose value is a whole number.
    static let integers: Set<String> = [
        "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
        "tcp_user_timeout", "requiressl", "sslcompression",
    ]

    /// Whether `text` is a URI libpq reads (`postgresql://` or `postgres://`).
    public static func isURI(_ text: String) -> Bool {
        text.hasPrefix("postgresql://") || text.hasPrefix("postgres://")
    }

    /// Whether `text` is written as libpq `keyword=value` settings (its first word is a keyword followed by `=`).
    public static func isKeywordValue(_ text: String) -> Bool {
        let trimmed = text.drop(while: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" })
        guard let end = trimmed.firstIndex(where: { $0 == "=" || $0 == " " || $0 == "\t" }) else { return false }
        let word = trimmed[..<end]
        guard !word.isEmpty, word.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            return false
        }
        return trimmed[end...].drop(while: { $0 == " " || $0 == "\t" }).first == "="
    }

    /// The problem with `text` (a URI or `keyword=value` settings), or nil when libpq will accept it.
    public static func problem(in text: String) -> Problem? {
        do {
            if isURI(text) {
                try checkURI(text)
            } else {
                _ = try settings(text)
            }
            return nil
        } catch {
            return error
        }
    }

    /// The settings of a `keyword=value` string, in order, after libpq's unquoting.
    /// - Throws: `Problem` for a missing `=`, an unterminated quote or an unknown keyword.
    public static func settings(_ text: String) throws(Problem) -> [(key: String, value: String)] {
        let chars = Array(text)
        var result: [(key: String, value: String)] = []
        var i = 0
        func skipSpace() { while i < chars.count, chars[i].isWhitespace { i += 1 } }
        while true {
            skipSpace()
            guard i < chars.count else { break }
            var key = ""
            while i < chars.count, !chars[i].isWhitespace, chars[i] != "=" {
                key.append(chars[i])
                i += 1
            }
            skipSpace()
            guard i < chars.count, chars[i] == "=" else {
                // The word itself is not quoted: it may be a piece of a password written without quotes.
                let place = result.last.map { "after the \($0.key) setting" } ?? "at the start"
                throw Problem("a word without \"=\" \(place) of the connection string",
                              hint: "write keyword=value pairs separated by spaces, like host=db dbname=notes, and "
                                  + "quote a value that holds spaces: password='two words'")
            }
            i += 1
            skipSpace()
            var value = ""
            if i < chars.count, chars[i] == "'" {
                i += 1
                var closed = false
                while i < chars.count {
                    if chars[i] == "\\", i + 1 < chars.count {
                        value.append(chars[i + 1])
                        i += 2
                        continue
                    }
                    if chars[i] == "'" {
                        closed = true
                        i += 1
                        break
                    }
                    value.append(chars[i])
                    i += 1
                }
                guard closed else {
                    throw Problem("unterminated quoted value for \"\(key)\" in the connection string",
                                  hint: "close the value with ', and write \\' for a quote inside it")
                }
            } else {
                while i < chars.count, !chars[i].isWhitespace {
                    if chars[i] == "\\", i + 1 < chars.count { i += 1 }
                    value.append(chars[i])
                    i += 1
                }
            }
            // A word right after a password may be the rest of a password written without quotes: never quote it.
            let afterSecret = result.last.map { Redaction.secretKeywords.contains($0.key) } ?? false
            if afterSecret, !keywords.contains(key) {
                throw Problem("an unknown setting follows the password in the connection string",
                              hint: "quote a password that holds spaces: password='two words'")
            }
            try check(key: key, value: value)
            result.append((key, value))
        }
        return result
    }

    /// Checks a `postgresql://` URI part by part.
    static func checkURI(_ uri: String) throws(Problem) {
        guard let schemeEnd = uri.firstRange(of: "://") else { throw Problem("not a postgresql:// URI") }
        var rest = uri[schemeEnd.upperBound...]
        guard !rest.isEmpty else {
            throw Problem("the URI has no host or database",
                          hint: "write postgres://USER@HOST/DATABASE, or postgres:///DATABASE for the local socket")
        }
        var query: Substring?
        if let q = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: q)...]
            rest = rest[..<q]
        }
        var authority = rest
        var database: Substring?
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            database = rest[rest.index(after: slash)...]
        }
        var hosts = authority
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hosts = authority[authority.index(after: at)...]
            guard PercentEncoding.decoded(String(userInfo)) != nil else {
                throw Problem("the user name or password in the URI has a malformed %-escape",
                              hint: "write each reserved character as %XX (for example @ as %40)")
            }
        }
        for host in hosts.split(separator: ",", omittingEmptySubsequences: false) {
            try checkHost(host)
        }
        if let database, PercentEncoding.decoded(String(database)) == nil {
            throw Problem("the database name in the URI has a malformed %-escape",
                          hint: "write each reserved character as %XX")
        }
        guard let query else { return }
        for item in query.split(separator: "&", omittingEmptySubsequences: true) {
            guard let equals = item.firstIndex(of: "=") else {
                throw Problem("the URI parameter '\(item)' has no '=' and value", hint: "write ?keyword=value")
            }
            guard let key = PercentEncoding.decoded(String(item[..<equals])),
                  let value = PercentEncoding.decoded(String(item[item.index(after: equals)...]))
            else {
                throw Problem("a URI parameter has a malformed %-escape", hint: "write each reserved character as %XX")
            }
            if key == "ssl" {
                guard value == "true" else {
                    throw Problem("the URI parameter ssl must be 'true', got '\(value)'", hint: "or use sslmode=...")
                }
                continue
            }
            try check(key: key, value: value)
        }
    }

    /// Checks one `host[:port]` of a URI: an IPv6 address in brackets, a port of 1 to 65535.
    private static func checkHost(_ spec: Substring) throws(Problem) {
        var port: Substring?
        if spec.hasPrefix("[") {
            guard let close = spec.firstIndex(of: "]") else {
                throw Problem("the IPv6 address '\(spec)' in the URI has no closing ']'", hint: "write [::1]:5432")
            }
            let after = spec[spec.index(after: close)...]
            if after.hasPrefix(":") {
                port = after.dropFirst()
            } else if !after.isEmpty {
                throw Problem("unexpected '\(after)' after the IPv6 address in the URI", hint: "write [::1]:5432")
            }
        } else {
            if let colon = spec.firstIndex(of: ":") {
                port = spec[spec.index(after: colon)...]
                if port?.contains(":") == true {
                    throw Problem("the host '\(spec)' has more than one ':'",
                                  hint: "write an IPv6 address in brackets, like [::1]:5432")
                }
            }
            if PercentEncoding.decoded(String(spec)) == nil {
                throw Problem("the host in the URI has a malformed %-escape", hint: "write each reserved character as %XX")
            }
        }
        if let port { try checkPort(String(port)) }
    }

    /// An empty port is libpq's default (5432).
    private static func checkPort(_ port: String) throws(Problem) {
        if port.isEmpty { return }
        guard port.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(port), (1...65535).contains(n) else {
            throw Problem("'\(port)' is not a port number (1 to 65535)", hint: "write host:5432")
        }
    }

    /// Checks one setting: a known keyword and, for the settings that have one, a valid value.
    private static func check(key: String, value: String) throws(Problem) {
        guard keywords.contains(key) else {
            let hint = Suggest.closest(key, in: keywords).map { "did you mean '\($0)'?" }
                ?? "see the PostgreSQL documentation, \"Parameter Key Words\""
            throw Problem("'\(key)' is not a PostgreSQL connection setting", hint: hint)
        }
        if Redaction.secretKeywords.contains(key) { return }
        if let options = choices[key], !options.contains(value) {
            throw Problem("\(key) must be one of \(options.joined(separator: ", ")), got '\(value)'",
                          hint: Suggest.closest(value, in: options).map { "did you mean '\($0)'?" }
                              ?? "see the PostgreSQL documentation, \"Parameter Key Words\"")
        }
        if integers.contains(key), Int(value.trimmingSpaces()) == nil {
            throw Problem("\(key) must be a whole number, got '\(value)'", hint: "write \(key)=10")
        }
        if key == "port" {
            for port in value.split(separator: ",", omittingEmptySubsequences: false) {
                try checkPort(String(port))
            }
        }
    }
}
