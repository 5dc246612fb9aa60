import XCTest
final class PPlugins_Relay_Tests: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
