import XCTest
final class UDPPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
