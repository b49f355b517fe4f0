import Foundation
import StoreBase
@testable import StoreConfig
import TestSupport
import XCTest

/// Mutates configs: the corpus (valid and malformed) is the seed, and each step flips, inserts, deletes, repeats or
/// splices bytes, favouring the ones YAML and storectl give meaning to.
struct ConfigMutator {
    static let tokens: [[UInt8]] = [
        ":", ": ", "{", "}", "[", "]", ",", "-", "- ", "? ", "&a ", "*a", "!!str ", "!x ", "|", ">", "\t", "\n", "\r\n",
        "\"", "'", "#", "%YAML 1.1\n", "---\n", "...\n", "${X}", "${", "$${", "${UNSET}", "${X:-d}", "\\0", "\\x85",
        "\u{FEFF}", "~", "null", "true", "1e400", "-1", "99999999999999999999", "200000000000d", "secret: s3",
        "postgres://u:p@h:0/d", "host=h password='x", "file:", "~/", "\u{0}", "\u{7F}", "\u{1B}[31m", "é", "💥",
        "stores:", "cloud:", "path:", "url:", "mode: cloud", "entities:", "unique: [", "keep: newest(",
    ].map { Array($0.utf8) }

    var rng: SplitMix64

    mutating func mutate(_ input: [UInt8], corpus: [[UInt8]]) -> [UInt8] {
        var bytes = input
        for _ in 0..<(Int.random(in: 0..<4, using: &rng) == 0 ? 3 : 1) {
            let at = bytes.isEmpty ? 0 : Int.random(in: 0...bytes.count, using: &rng)
            switch Int.random(in: 0..<7, using: &rng) {
            case 0 where !bytes.isEmpty:
                let i = min(at, bytes.count - 1)
                bytes[i] ^= UInt8(1 << Int.random(in: 0..<8, using: &rng))
            case 1:
                bytes.insert(contentsOf: Self.tokens.randomElement(using: &rng) ?? [], at: at)
            case 2 where !bytes.isEmpty:
                let end = min(bytes.count, at + Int.random(in: 1...16, using: &rng))
                bytes.removeSubrange(min(at, end)..<end)
            case 3 where !bytes.isEmpty:
                let start = min(at, bytes.count - 1)
                let end = min(bytes.count, start + Int.random(in: 1...32, using: &rng))
                let piece = Array(bytes[start..<end])
                bytes.insert(contentsOf: Array(repeating: piece, count: Int.random(in: 1...8, using: &rng)).joined(),
                             at: start)
            case 4:
                let other = corpus.randomElement(using: &rng) ?? []
                let cut = other.isEmpty ? 0 : Int.random(in: 0...other.count, using: &rng)
                bytes = Array(bytes.prefix(at)) + other.suffix(from: cut)
            case 5:
                bytes.insert(UInt8.random(in: 0...255, using: &rng), at: at)
            default:
                // Deep nesting or a very long line, now and then.
                let n = Int.random(in: 1...300, using: &rng)
                bytes.insert(contentsOf: Array(repeating: UInt8(ascii: Bool.random(using: &rng) ? "[" : "a"),
                                               count: n), at: at)
            }
        }
        return bytes
    }
}

/// The seeds of the config fuzzer: every corpus case, and valid configs that use every key.
let fuzzSeeds: [[UInt8]] = (malformedCorpus + hostileCorpus).map { $0.bytes ?? Array($0.text.utf8) } + [
    """
    # a valid config with every key
    version: 1
    stores:
      notes:
        path: data/notes.sqlite
        schema: schema.sql
        mode: local
        history: {tracking: true, author: app, retention: 30d}
        cloud:
          container: iCloud.com.example.notes
          url: file:cloud/notes.container
          create_if_missing: true
          zone: default
          account: demo
          secret: ${SECRET:-demo-secret}
          merge_policy: property-local-wins
          max_delete_fraction: 0.5
        entities:
          notes: {unique: [uuid], keep: newest(updated_at), tombstone: [uuid]}
        seed:
          name: defaults-v1
          rows:
            tags: [{name: red}, {name: blue}]
      other:
        path: ~/other.sqlite
        cloud: {container: iCloud.com.example.other, url: "host=db dbname=x password='p w'", account: bob}
    """,
].map { Array($0.utf8) }

/// A seeded mutation loop over the config loader: whatever the bytes, loading ends in a config or a config error
/// (exit 78) with a position, in bounded time, never a crash. It runs `STORECTL_FUZZ_SECONDS` (default 8) seconds;
/// `STORECTL_FUZZ_SEED` replays a run.
final class ConfigFuzzTests: XCTestCase {
    func testMutatedConfigsLoadOrFailWithExit78() throws {
        let env = ProcessInfo.processInfo.environment
        let seconds = env["STORECTL_FUZZ_SECONDS"].flatMap(Double.init) ?? 8
        let seed = env["STORECTL_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 0...UInt64.max)
        print("config fuzz: seed \(seed) (STORECTL_FUZZ_SEED=\(seed) replays it), \(seconds) s")
        var mutator = ConfigMutator(rng: SplitMix64(seed: seed))
        let environment = ["X": "x", "HOME": "/home/u", "SECRET": "s3", "NL": "a\nb"]
        let start = Date()
        var runs = 0, loaded = 0, refused = 0
        var slowest = 0.0
        var pool = fuzzSeeds
        while Date().timeIntervalSince(start) < seconds {
            let parent = pool.randomElement(using: &mutator.rng) ?? []
            var input = mutator.mutate(parent, corpus: fuzzSeeds)
            if input.count > 256 * 1024 { input = Array(input.prefix(256 * 1024)) }
            let t0 = Date()
            do {
                let result = try ConfigLoader.load(bytes: input, path: "/srv/app/config.yaml",
                                                   displayPath: "config.yaml", environment: environment)
                loaded += 1
                _ = try ConfigValue.written(result.document).yaml()
                _ = try ConfigValue.resolved(result.config).yaml()
            } catch let error as ConfigError {
                refused += 1
                XCTAssertEqual(error.exitCode, .config, "seed \(seed), input \(runs): \(error)")
                XCTAssertNotNil(error.line, "seed \(seed), input \(runs): no position: \(error)")
                // Every excerpt line stays readable, whatever the input line was.
                for line in error.details where line.contains(" | ") {
                    XCTAssertLessThan(line.count, 140, "seed \(seed), input \(runs): \(line.prefix(200))")
                }
            } catch {
                XCTFail("seed \(seed), input \(runs): not a config error: \(error)\n"
                        + String(decoding: input.prefix(500), as: UTF8.self))
            }
            let took = Date().timeIntervalSince(t0)
            slowest = max(slowest, took)
            XCTAssertLessThan(took, 2.0, "seed \(seed), input \(runs) took \(took) s")
            // Keep some mutants as parents, so that mutations pile up.
            if runs % 8 == 0 { pool.append(input) }
            if pool.count > 4000 { pool.removeFirst(2000) }
            runs += 1
        }
        print("config fuzz: \(runs) inputs, \(loaded) loaded, \(refused) refused with exit 78, slowest "
              + "\(Int(slowest * 1000)) ms")
        XCTAssertGreaterThan(runs, 100)
        XCTAssertGreaterThan(refused, 0)
    }
}
