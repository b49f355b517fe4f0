@testable import StoreControl
import XCTest

/// The Prometheus text that `watch --metrics-file` and `status --metrics` write, in process: the histogram, the
/// numbers, the escaping, and which samples a store has.
final class MetricsTextTests: XCTestCase {
    private func gauges(_ store: String, up: Bool = true) -> StoreGauges {
        guard up else { return .down(store) }
        return StoreGauges(store: store, up: true, cloudMode: true, lastSuccessSeconds: 1_714_557_600.123,
                           pendingExportRows: 3, setAsideRecords: 2, waitingForParentRecords: 1, failing: true)
    }

    private func samples(_ text: String) -> [String] {
        text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map(String.init)
    }

    func testTheHistogramCountsEachRoundInOneBucketAndCumulates() {
        var h = RoundHistogram()
        for seconds in [0.0005, 0.001, 0.003, 400, -1] { h.observe(seconds) }
        XCTAssertEqual(h.count, 5)
        XCTAssertEqual(h.sum, 400.0045, accuracy: 1e-9)
        let cumulative = h.cumulative
        XCTAssertEqual(cumulative.count, RoundHistogram.bounds.count + 1)
        XCTAssertEqual(cumulative[0], 3, "0.0005, a bound itself (le is inclusive) and a negative clock step")
        XCTAssertEqual(cumulative[1], 3)
        XCTAssertEqual(cumulative[2], 4)
        XCTAssertEqual(cumulative[RoundHistogram.bounds.count - 1], 4)
        XCTAssertEqual(cumulative.last, 5, "+Inf holds every round")
        XCTAssertEqual(cumulative, cumulative.sorted())
    }

    func testNumbersAreWhatPrometheusParses() {
        XCTAssertEqual(MetricsText.number(3), "3")
        XCTAssertEqual(MetricsText.number(0), "0")
        XCTAssertEqual(MetricsText.number(0.0025), "0.0025")
        XCTAssertEqual(MetricsText.number(1_714_557_600.123), "1714557600.123")
        XCTAssertEqual(MetricsText.number(.infinity), "+Inf")
        XCTAssertEqual(MetricsText.number(.nan), "NaN")
        for value in [0.1, 1e-7, 12_345.678, 1e20] {
            XCTAssertEqual(Double(MetricsText.number(value)), value, "\(value) reads back exactly")
        }
    }

    func testLabelValuesAndHelpAreEscaped() {
        XCTAssertEqual(MetricsText.escapeLabel(#"a"b\c"# + "\nd"), #"a\"b\\c\nd"#)
        XCTAssertEqual(MetricsText.escapeHelp(#"a\b"# + "\n\"c\""), #"a\\b\n"c""#)
        let text = MetricsText.render(gauges: [gauges("we\"ird")], rounds: nil)
        XCTAssertTrue(text.contains(#"storectl_store_up{store="we\"ird"} 1"#), text)
    }

    func testAStoreThatIsDownHasOnlyUpAndLastSuccess() {
        let text = MetricsText.render(gauges: [gauges("b", up: false), gauges("a")], rounds: nil)
        let b = samples(text).filter { $0.contains(#"store="b""#) }
        XCTAssertEqual(b, [#"storectl_store_up{store="b"} 0"#, #"storectl_last_success_timestamp_seconds{store="b"} 0"#])
        let a = samples(text).filter { $0.contains(#"store="a""#) }
        XCTAssertEqual(a, [
            #"storectl_store_up{store="a"} 1"#, #"storectl_cloud_mode{store="a"} 1"#,
            #"storectl_last_success_timestamp_seconds{store="a"} 1714557600.123"#,
            #"storectl_pending_export_rows{store="a"} 3"#, #"storectl_set_aside_records{store="a"} 2"#,
            #"storectl_waiting_for_parent_records{store="a"} 1"#, #"storectl_sync_failing{store="a"} 1"#,
        ])
        // Every family has its HELP and TYPE lines, in that order, and no round families without rounds.
        let lines = text.split(separator: "\n")
        let types = lines.filter { $0.hasPrefix("# TYPE ") }
        XCTAssertEqual(types.count, 7)
        XCTAssertFalse(text.contains("storectl_rounds_total"))
        for (i, line) in lines.enumerated() where line.hasPrefix("# TYPE ") {
            XCTAssertTrue(lines[i - 1].hasPrefix("# HELP " + line.split(separator: " ")[2] + " "), String(line))
        }
    }

    func testRoundsAreCountedByResultAndTimed() {
        var counts = RoundCounts()
        counts.byResult["temporary", default: 0] += 2
        counts.byResult["ok", default: 0] += 1
        for seconds in [0.001953125, 0.25, 7] { counts.durations.observe(seconds) }  // exact in binary
        let text = MetricsText.render(gauges: [gauges("a")], rounds: ["a": counts, "b": RoundCounts()])
        let lines = samples(text)
        XCTAssertTrue(lines.contains(#"storectl_rounds_total{store="a",result="ok"} 1"#), text)
        XCTAssertTrue(lines.contains(#"storectl_rounds_total{store="a",result="temporary"} 2"#), text)
        XCTAssertTrue(lines.contains(#"storectl_rounds_total{store="b",result="ok"} 0"#), "a new store starts at 0")
        XCTAssertTrue(lines.contains(#"storectl_round_duration_seconds_bucket{store="a",le="0.0025"} 1"#), text)
        XCTAssertTrue(lines.contains(#"storectl_round_duration_seconds_bucket{store="a",le="+Inf"} 3"#), text)
        XCTAssertTrue(lines.contains(#"storectl_round_duration_seconds_count{store="a"} 3"#), text)
        XCTAssertTrue(lines.contains(#"storectl_round_duration_seconds_sum{store="a"} 7.251953125"#), text)
        XCTAssertEqual(text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.count, 9)
    }
}
