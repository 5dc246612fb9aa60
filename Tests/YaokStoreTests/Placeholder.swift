import XCTest
final class YaokStoreTestsPlaceholder: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
