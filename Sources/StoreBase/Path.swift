/// Path strings, taken apart and joined the way `NSString`'s path methods do, without loading Foundation's
/// Objective-C bridge (storectl links only FoundationEssentials, which keeps every command's start short).
public enum Path {
    /// The folder part: `a/b/c.db` → `a/b`, `/c.db` → `/`, `c.db` → `` (empty).
    public static func parent(_ path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        var head = trimmed[..<slash]
        while head.count > 1 && head.hasSuffix("/") { head = head.dropLast() }
        return String(head)
    }

    /// The last component: `a/b/c.db` → `c.db`.
    public static func lastComponent(_ path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/"), trimmed.count > 1 else { return String(trimmed) }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    /// `component` under `folder`, with one slash between them.
    public static func join(_ folder: String, _ component: String) -> String {
        if folder.isEmpty { return component }
        if component.isEmpty { return folder }
        return folder.hasSuffix("/") ? folder + component : folder + "/" + component
    }

    /// `path` with `~` expanded to `home` (when given: the caller's `HOME`), repeated slashes, `.` and `..` removed
    /// (for an absolute path) and no trailing slash: a lexical normal form, as `NSString.standardizingPath` gives on
    /// Linux. Symbolic links are kept.
    public static func standardized(_ path: String, home: String? = nil) -> String {
        var p = path
        if p == "~" || p.hasPrefix("~/"), let home, !home.isEmpty {
            p = home + p.dropFirst()
        }
        let absolute = p.hasPrefix("/")
        var parts: [Substring] = []
        for part in p.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == "..", absolute {
                if !parts.isEmpty { parts.removeLast() }
                continue
            }
            parts.append(part)
        }
        let joined = parts.joined(separator: "/")
        if absolute { return "/" + joined }
        return joined.isEmpty ? (p.isEmpty ? "" : ".") : joined
    }
}
