import XCTest
final class YaokHubTestsPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
