import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreConfig
import StoreControl

extension CommandContext {
    /// The store's `cloud:` settings, for the `account` and `cloud` commands.
    /// - Throws: the config's errors; `StoreError` (exit 78) naming `stores.<name>.cloud` when it is missing.
    func cloudSettings() throws -> (store: StoreSettings, cloud: CloudSettings) {
        let store = try openStore()
        guard let cloud = store.settings.cloud else {
            let name = store.settings.name
            throw StoreError(.config,
                             "store '\(name)' has no cloud settings (stores.\(name).cloud is missing in "
                                 + "\(configDisplayPath))",
                             hint: "add a cloud: section with container, url, account and secret to "
                                 + "stores.\(store.settings.name)")
        }
        return (store.settings, cloud)
    }

    /// Whether stdin is a terminal (a person can answer a question).
    var stdinIsTerminal: Bool { isatty(0) == 1 }

    /// Asks a question on stderr and reads one line from stdin; with `hidden`, what is typed is not echoed.
    func ask(_ question: String, hidden: Bool = false) -> String? {
        console.errRaw(question)
        guard hidden, stdinIsTerminal else { return readLine(strippingNewline: true) }
        var saved = termios()
        guard tcgetattr(0, &saved) == 0 else { return readLine(strippingNewline: true) }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(0, TCSANOW, &quiet)
        defer {
            tcsetattr(0, TCSANOW, &saved)
            console.errRaw("\n")
        }
        return readLine(strippingNewline: true)
    }
}

/// A time as ISO 8601 (UTC), for output.
func isoTime(_ seconds: Double) -> String {
    ISOTime.string(unixMilliseconds: Int64((seconds * 1000).rounded(.down)), fractional: false)
}
