import XCTest
final class YaokWireTestsPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
