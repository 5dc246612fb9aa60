import XCTest
final class YaokATTTestsPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
