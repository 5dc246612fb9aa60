import XCTest
final class PTests_RelayTests: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
