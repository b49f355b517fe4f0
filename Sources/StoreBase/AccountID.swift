/// The rule for account ids, checked where the config is read and where a container registers an account, so the
/// two always agree.
public enum AccountID {
    /// The rule, as a hint.
    public static let rule = "an account id is 1 to 200 letters, digits and punctuation, without spaces"

    /// What is wrong with `id` as an account id, or nil when it is valid.
    ///
    ///     AccountID.problem("alice")  // nil
    ///     AccountID.problem("a b")    // "'a b' is not a valid account id: it holds a space"
    public static func problem(_ id: String) -> String? {
        if id.isEmpty { return "an account id must not be empty" }
        if id.count > 200 { return "the account id is \(id.count) characters long; the limit is 200" }
        if let bad = id.unicodeScalars.first(where: { $0.properties.isWhitespace || $0.value < 0x20
                                                        || (0x7F...0x9F).contains($0.value) })
        {
            let what = bad == " " ? "a space" : bad.properties.isWhitespace ? "white space"
                : "a control character"
            return "'\(Redaction.text(id.unicodeScalars.map { isPrintable($0) ? String($0) : "?" }.joined()))' "
                + "is not a valid account id: it holds \(what)"
        }
        return nil
    }

    private static func isPrintable(_ s: Unicode.Scalar) -> Bool {
        s.value >= 0x20 && !(0x7F...0x9F).contains(s.value)
    }
}
