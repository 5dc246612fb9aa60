import XCTest
@testable import YaokConsole
final class ConsoleAuthTests: XCTestCase { func testNothing() {} }
