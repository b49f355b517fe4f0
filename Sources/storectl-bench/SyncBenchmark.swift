import Foundation
import StoreBase
import StoreControl

/// `storectl-bench sync`: an incremental sync of 1,000 changes grows from a 1,000-row to an N-row store no more
/// than the app's own 1,000 spread updates do (cost follows the changes, and the scattered pages they touch).
/// Target: sync growth / app growth <= 1.3.
enum SyncBenchmark {
    static let help = """
        usage: storectl-bench sync [--rows N] [--repeat R] [--json]

        Two pairs of synced stores, one of N rows and one of 1,000 rows (each: store A exported to a container,
        store B imported from it). Each round updates 1,000 rows of A (spread over the table) by author 'app',
        then times A's sync (open the mirror, export the 1,000 changes, import nothing new) and then B's sync
        (import the 1,000 changes). One untimed sync of each store comes first (B's first export is a baseline,
        since it only imported so far). The rounds alternate between the two sizes; the median of R rounds is kept.
        The reference, measured in the same rounds: the app's own 1,000 spread updates (one transaction, no sync),
        which touch the same scattered pages. Figures, for each side: (median on N rows / median on 1,000 rows) /
        (the same ratio of the app's updates). Target: <= 1.3.
        """

    static let changes = 1_000

    static func main(_ argv: [String]) throws {
        try Runner.main("sync", argv, help: help) { lab, options, report in
            report.figures = try figures(lab, options)
        }
    }

    static func figures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        let sizes = [options.rows, changes]
        var pairs: [Int: Lab.Pair] = [:]
        // The one-table shape: the updates address notes by their integer id.
        for size in sizes { pairs[size] = try lab.pair(rows: size, shape: .single) }
        // One untimed round first: B's first sync is its baseline export (it only imported so far), and A's first
        // import steps over its own baseline records; neither is an incremental sync.
        for size in sizes {
            guard let pair = pairs[size] else { continue }
            for name in [pair.a, pair.b] {
                let store = try lab.open(name)
                _ = try store.openMirror().sync()
                store.close()
            }
        }
        var exportSide: [Int: [Double]] = [:]
        var importSide: [Int: [Double]] = [:]
        var appSide: [Int: [Double]] = [:]
        let rounds = min(options.repeats, 5)
        for round in 0..<rounds {
            for size in round % 2 == 0 ? sizes : sizes.reversed() {
                guard let pair = pairs[size] else { continue }
                let a = try lab.open(pair.a)
                let db = try a.database()
                let stride = max(1, size / changes)
                // The app's own 1,000 spread updates are the reference: the same scattered pages, no sync.
                appSide[size, default: []].append(try Clock.seconds {
                _ = try a.historyTracker().write(author: "app") {
                    let update = try db.prepare("UPDATE notes SET title = ?, updated_at = ? WHERE id = ?")
                    for k in 0..<changes {
                        let id = 1 + (k * stride + round) % size
                        try update.bind(["Edited \(round)-\(k)", 1_800_000_000_000 + k, id])
                        _ = try update.step()
                    }
                }
                })
                var exported = 0
                Trace.reset()
                exportSide[size, default: []].append(try Clock.seconds {
                    exported = try a.openMirror().sync().exported.saved
                })
                if Trace.enabled {
                    Output.note("trace of the export-side sync, \(size) rows, round \(round + 1):")
                    Trace.report()
                }
                a.close()
                let b = try lab.open(pair.b)
                var imported = 0
                Trace.reset()
                importSide[size, default: []].append(try Clock.seconds {
                    imported = try b.openMirror().sync().imported.applied
                })
                if Trace.enabled {
                    Output.note("trace of the import-side sync, \(size) rows, round \(round + 1):")
                    Trace.report()
                }
                b.close()
                guard exported == changes, imported == changes else {
                    throw StoreError(.software, "round \(round + 1) on \(size) rows exported \(exported) and "
                                     + "imported \(imported) changes, expected \(changes) each")
                }
                Output.note("sync round \(round + 1), \(size) rows: export side \(ms(exportSide[size]?.last ?? 0)), "
                            + "import side \(ms(importSide[size]?.last ?? 0))")
            }
        }
        func figure(_ id: String, _ what: String, _ times: [Int: [Double]]) -> Figure {
            let big = median(times[options.rows] ?? []), small = median(times[changes] ?? [])
            let appBig = median(appSide[options.rows] ?? []), appSmall = median(appSide[changes] ?? [])
            let growth = big / small, appGrowth = appBig / max(appSmall, 1e-9)
            return Figure(id: id, what: what, value: growth / appGrowth, unit: .ratio, target: .atMost(1.3),
                          detail: "\(options.rows) rows \(ms(big)), 1,000 rows \(ms(small)) = "
                              + String(format: "%.2fx", growth) + " (median of \(rounds)); the app's own 1,000 "
                              + "updates: \(ms(appBig)) vs \(ms(appSmall)) = " + String(format: "%.2fx", appGrowth),
                          numbers: ["large_seconds": big, "small_seconds": small, "rounds": Double(rounds),
                                    "growth": growth, "app_growth": appGrowth,
                                    "changes": Double(changes), "app_updates_large_seconds": appBig,
                                    "app_updates_small_seconds": appSmall])
        }
        return [
            figure("sync.export", lab.singleOnly("incremental sync of 1,000 local changes, growth N vs 1k / the app's"),
                   exportSide),
            figure("sync.import", lab.singleOnly("incremental sync importing 1,000 changes, growth N vs 1k / the app's"),
                   importSide),
        ]
    }
}
