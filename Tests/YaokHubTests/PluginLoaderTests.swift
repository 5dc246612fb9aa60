import Logging
import XCTest
import YaokPluginKit
@testable import YaokHubCore
@testable import YaokSupervision

final class PluginLoaderTests: XCTestCase {
    let logger = Logger(label: "test")

    func testLoadsGoodPluginAndRefusesBadOnesEachWithAReason() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        _ = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-good.so", defines: ["PLUGIN_KIND=\"good\""])
        _ = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-noentry.so", defines: ["NO_ENTRY"])
        _ = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-future.so", defines: ["PLUGIN_KIND=\"future\"", "ABI_VERSION=999"])
        // Same kind as "good", found later in name order: refused as a duplicate.
        _ = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-kopy.so", defines: ["PLUGIN_KIND=\"good\""])
        let unsafe = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-unsafe.so", defines: ["PLUGIN_KIND=\"unsafe\""])
        chmod(unsafe, 0o666)
        // Not named like a plugin: ignored entirely.
        _ = try TestSupport.buildCPlugin(into: dir, name: "libother.so", defines: ["PLUGIN_KIND=\"other\""])

        let catalog = PluginLoader.scan(directories: [dir], logger: logger)
        XCTAssertEqual(Set(catalog.loaded.keys), ["good"])
        func reason(_ file: String) -> String? { catalog.discovered.first { $0.path.hasSuffix(file) }?.reason }
        XCTAssertEqual(catalog.discovered.count, 5)
        XCTAssertTrue(reason("noentry.so")?.contains("missing entry symbol yaok_plugin_entry") == true, reason("noentry.so") ?? "nil")
        XCTAssertTrue(reason("future.so")?.contains("plugin has ABI version 999, this hub has ABI version 1") == true, reason("future.so") ?? "nil")
        XCTAssertTrue(reason("kopy.so")?.contains("duplicate kind \"good\"") == true, reason("kopy.so") ?? "nil")
        XCTAssertTrue(reason("unsafe.so")?.contains("writable by group or others") == true, reason("unsafe.so") ?? "nil")
        XCTAssertEqual(catalog.discovered.first { $0.path.hasSuffix("good.so") }?.state, .loaded)
    }

    func testRefusesWorldWritableDirectory() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        _ = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-good.so", defines: ["PLUGIN_KIND=\"good\""])
        chmod(dir, 0o777)
        let catalog = PluginLoader.scan(directories: [dir], logger: logger)
        XCTAssertTrue(catalog.loaded.isEmpty)
        XCTAssertTrue(catalog.directories.first?.problem?.contains("writable by group or others") == true)
    }

    func testRefusesFileOwnedBySomeoneElse() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to chown a file to another user") }
        let dir = try TestSupport.temporaryDirectory(self)
        let path = try TestSupport.buildCPlugin(into: dir, name: "libyaok-plugin-good.so", defines: ["PLUGIN_KIND=\"good\""])
        chown(path, 65534, 65534)
        let catalog = PluginLoader.scan(directories: [dir], logger: logger)
        XCTAssertTrue(catalog.loaded.isEmpty)
        XCTAssertTrue(catalog.discovered.first?.reason?.contains("owned by uid 65534") == true, catalog.discovered.first?.reason ?? "")
    }
}
