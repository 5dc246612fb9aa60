import XCTest
final class BLEPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
