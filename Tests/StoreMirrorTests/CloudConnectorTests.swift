import Foundation
@testable import StoreControl
import StoreBase
import XCTest

/// Working out the backend from `cloud.url`.
final class CloudConnectorTests: XCTestCase {
    func testPercentDecodingMatchesFoundation() {
        for text in ["/plain/path", "/a%20b/c%2Fd", "/caf%C3%A9", "/bad%2", "/bad%zz", "/not-utf8%FF", "%", "/%41%62",
                     "/100%25"]
        {
            XCTAssertEqual(PercentEncoding.decoded(text), text.removingPercentEncoding, text)
        }
    }

    func testFileURLs() throws {
        XCTAssertEqual(try CloudConnector.backend(of: "file:/srv/a%20b.container"), .file(path: "/srv/a b.container"))
        XCTAssertEqual(try CloudConnector.backend(of: "file:///srv/x.container"), .file(path: "/srv/x.container"))
        XCTAssertEqual(try CloudConnector.backend(of: "file://localhost/srv/x"), .file(path: "/srv/x"))
        XCTAssertEqual(try CloudConnector.backend(of: "file:/srv/100%"), .file(path: "/srv/100%"))
    }
}
