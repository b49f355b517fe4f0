import StoreBase
import StoreConfig
import StoreControl

/// A store that `status` of every store lists with the error of its config section, in place of its report.
///
/// In JSON it is `{"store": NAME, "error": {...}}`, the body of storectl's error documents (docs/json.md).
struct StatusConfigProblem: Encodable {
    var store: String
    var error: WatchErrorBody

    init(_ problem: StoreConfigProblem, context: CommandContext) {
        store = problem.store
        error = WatchErrorBody(problem.error, store: problem.store)
        error.hint = error.hint.map { context.render($0, store: problem.store) }
    }

    /// The store as a block of labelled lines, like a report's.
    func block(console: Console) -> String {
        var lines = ["store " + console.paintOut(store, "1") + "  " + console.paintOut("config error", "31;1")]
        lines.append("  error  " + (error.location.map { $0 + ": " } ?? "") + error.message)
        if let hint = error.hint { lines.append("  hint   " + hint) }
        return lines.joined(separator: "\n")
    }
}

/// One store of `status`: its report, or the error of its config section.
enum StatusEntry: Encodable {
    case report(StatusReport)
    case configProblem(StatusConfigProblem)

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .report(let report): try report.encode(to: encoder)
        case .configProblem(let problem): try problem.encode(to: encoder)
        }
    }
}
