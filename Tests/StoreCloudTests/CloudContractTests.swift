import StoreCloud
import XCTest

/// The rules of `CloudContract` on their own; the conformance suite proves each backend follows them.
final class CloudContractTests: XCTestCase {
    private func kind(_ body: () throws -> Void) -> CloudError.Kind? {
        do { try body() } catch let error as CloudError { return error.kind } catch { return .other }
        return nil
    }

    func testContainerMetaIsCheckedTheSameForEveryBackend() throws {
        XCTAssertEqual(try CloudContract.checkMeta(version: "2", container: "iCloud.a", expected: "iCloud.a",
                                                   newest: 2, place: "x"), 2)
        XCTAssertEqual(try CloudContract.checkMeta(version: "1", container: "iCloud.a", expected: "iCloud.a",
                                                   newest: 2, place: "x"), 1, "an older one is the caller's to upgrade")
        do {
            try CloudContract.checkMeta(version: "3", container: "iCloud.a", expected: "iCloud.a", newest: 2,
                                        place: "/srv/c")
            XCTFail("a newer format must be refused")
        } catch let error as CloudError {
            XCTAssertEqual(error.kind, .notAContainer)
            XCTAssertEqual(error.summary, "/srv/c is a container of format version 3, newer than this storectl reads (2)")
            XCTAssertEqual(error.hint, "upgrade storectl")
        }
        do {
            try CloudContract.checkMeta(version: "2", container: "iCloud.b", expected: "iCloud.a", newest: 2,
                                        place: "/srv/c")
            XCTFail("another container must be refused")
        } catch let error as CloudError {
            XCTAssertEqual(error.summary, "/srv/c holds container 'iCloud.b', not 'iCloud.a'")
        }
        XCTAssertEqual(kind { try CloudContract.checkMeta(version: nil, container: "iCloud.a", expected: "iCloud.a",
                                                          newest: 2, place: "x") }, .notAContainer)
        XCTAssertEqual(kind { try CloudContract.checkMeta(version: "two", container: "iCloud.a",
                                                          expected: "iCloud.a", newest: 2, place: "x") }, .notAContainer)
        XCTAssertEqual(kind { try CloudContract.checkMeta(version: "2", container: nil, expected: "iCloud.a",
                                                          newest: 2, place: "x") }, .notAContainer,
                       "a container that does not say which it is is not taken for the expected one")
    }

    /// A tombstone keeps its alias, whatever characters the target's name holds (a natural key's name has commas
    /// and quotes); anything else is stored as `{}`.
    func testTombstoneFieldsKeepOnlyAnAlias() {
        let natural = #"{"$alias":"tag_props:[\"tags/09e6\",\"color\"]"}"#
        XCTAssertEqual(RecordSave.tombstoneFields(natural), natural)
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"$alias":"tags/1"}"#), #"{"$alias":"tags/1"}"#)
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"$alias":"a","title":"x"}"#), "{}")
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"$alias":"a,b"}"#), #"{"$alias":"a,b"}"#)
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"$alias":1}"#), "{}")
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"$alias":""}"#), "{}")
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"title":"x"}"#), "{}")
        XCTAssertEqual(RecordSave.tombstoneFields("{}"), "{}")
        XCTAssertEqual(RecordSave.tombstoneFields(#"{"$alias":"a"} trailing"#), "{}")
    }

    func testTagsAndTokens() {
        XCTAssertEqual(CloudContract.changeTag(seq: 255, epoch: "0123456789abcdef"), "ff-01234567")
        XCTAssertEqual(CloudContract.changeTag(seq: 1, epoch: "ab"), "1-ab")
        let r = CloudRecord(zone: "z", recordName: "n", recordType: "t", fields: "{}", changeTag: "", seq: 7,
                            deleted: false, modifiedBy: "d", modifiedAt: 0)
        XCTAssertEqual(CloudContract.nextToken(epoch: "e", after: 3, zoneLastSeq: 20, page: [r], moreComing: true).seq, 7)
        XCTAssertEqual(CloudContract.nextToken(epoch: "e", after: 3, zoneLastSeq: 20, page: [r], moreComing: false).seq,
                       20)
        XCTAssertEqual(CloudContract.nextToken(epoch: "e", after: 30, zoneLastSeq: 20, page: [], moreComing: false).seq,
                       30)
        XCTAssertEqual(kind { try CloudContract.checkToken(ServerChangeToken(epoch: "old", seq: 1), epoch: "new",
                                                           zone: "z", container: "c") }, .zoneReset)
        XCTAssertNil(kind { try CloudContract.checkToken(nil, epoch: "new", zone: "z", container: "c") })
    }
}
