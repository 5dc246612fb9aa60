import XCTest
final class PPlugins_Mesh_Tests: XCTestCase { func testPlaceholder() { XCTAssertTrue(true) } }
