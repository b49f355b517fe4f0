import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreControl

/// `storectl cloud rekey`: changes the passphrase of the zone's encrypted fields, and with --rotate its data key.
struct CloudRekeyCommand: Command {
    static let name = "rekey"
    static let abstract = "Change the passphrase of the zone's encrypted fields (--rotate: and its data key)."
    static let discussion = """
        The current passphrase is the store's cloud.encryption_key; the new one comes from the environment
        variable named by --new-key-env, the first line of --new-key-file, or stdin (asked for, without echo, on
        a terminal). The store syncs first. Without --rotate, the zone's data key is wrapped again with the new
        passphrase: no record changes. With --rotate, a new data key is made and every record of the zone is sent
        again sealed with it. Then set cloud.encryption_key to the new passphrase on every device: a device still
        on the old one is refused (exit 77) at its next sync, and syncs normally once it has the new one.
        Exit 77 when the config's passphrase does not open the zone's key, or the account has a read-only share.
        """
    static let examples = [
        "NEW_NOTES_KEY=... storectl cloud rekey --new-key-env NEW_NOTES_KEY",
        "storectl cloud rekey --rotate --new-key-file ~/.config/notes.key --json",
    ]
    static let options = [
        OptionSpec("new-key-env", value: "VAR", help: "Read the new passphrase from this environment variable."),
        OptionSpec("new-key-file", value: "PATH", help: "Read the new passphrase from the first line of this file."),
        OptionSpec("rotate", help: "Also make a new data key and seal every record of the zone again with it."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let store = try context.openStore()
        let passphrase = try newPassphrase(args, context)
        let progress = SyncProgress(context: context)
        let report = try store.rekey(newPassphrase: passphrase, rotate: args.flag("rotate"), progress: progress.update)
        progress.finish()
        if context.global.json {
            context.console.json(report)
        } else {
            context.console.out((report.rotated ? "rotated the data key of" : "changed the passphrase of")
                                + " zone '\(report.zone)' in \(report.container) (key generation \(report.generation))"
                                + (report.rotated ? "; \(report.resent) record(s) sealed again" : ""))
            if !report.complete {
                context.console.err("note: some records changed meanwhile or could not be opened; the next "
                                    + "'storectl sync' of this store seals what is left")
            }
            context.console.err(context.render("next: set stores.\(report.store).cloud.encryption_key to the new "
                                               + "passphrase here and on every device of the zone", store: report.store))
        }
        return .ok
    }

    /// The new passphrase: --new-key-env, --new-key-file, or stdin.
    static func newPassphrase(_ args: ParsedArguments, _ context: CommandContext) throws -> String {
        if args.value("new-key-env") != nil, args.value("new-key-file") != nil {
            throw UsageError("--new-key-env and --new-key-file cannot be combined")
        }
        var value: String
        if let variable = args.value("new-key-env") {
            guard let v = context.environment[variable], !v.isEmpty else {
                throw UsageError("the environment variable \(variable) named by --new-key-env is not set or empty",
                                 hint: "export \(variable) with the new passphrase")
            }
            value = v
        } else if let path = args.value("new-key-file") {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw StoreError(.noInput, "cannot read the new passphrase from \(path)",
                                 hint: "check that the file exists and is readable")
            }
            value = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
                .first.map(String.init) ?? ""
        } else if context.stdinIsTerminal {
            value = context.ask("New passphrase: ", hidden: true) ?? ""
        } else {
            value = String(decoding: StandardStream.readAllInput(), as: UTF8.self)
            if let first = value.split(separator: "\n", omittingEmptySubsequences: false).first { value = String(first) }
        }
        while value.hasSuffix("\r") { value.removeLast() }
        guard !value.isEmpty else {
            throw UsageError("the new passphrase is empty",
                             hint: "pass it with --new-key-env VAR, --new-key-file PATH, or on stdin")
        }
        return value
    }
}
