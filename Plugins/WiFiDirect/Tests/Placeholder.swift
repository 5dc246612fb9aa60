import XCTest
final class WiFiDirectPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
