import Foundation
import XCTest
import YaokRNodeEmulator
import YaokTesting

/// The built `libyaok-plugin-lora.so` through the C ABI, as the hub loads it: its config keys
/// and what its status says about a device.
final class LoRaPluginTests: XCTestCase {
    func testEveryBadKeyIsRefusedByName() throws {
        let host = try PluginTestHost(plugin: "lora")
        let missing = try XCTUnwrap(host.create(config: [:]))
        XCTAssertTrue(missing.contains("device"), missing)
        let unknown = try XCTUnwrap(host.create(config: ["device": "/dev/ttyACM0", "spreding_factor": 9]))
        XCTAssertTrue(unknown.contains("spreding_factor"), unknown)
        let sf = try XCTUnwrap(host.create(config: ["device": "/dev/ttyACM0", "spreading_factor": 13]))
        XCTAssertTrue(sf.contains("spreading_factor"), sf)
        let bandwidth = try XCTUnwrap(host.create(config: ["device": "/dev/ttyACM0", "bandwidth_hz": 100_000]))
        XCTAssertTrue(bandwidth.contains("bandwidth_hz"), bandwidth)
        let peers = try XCTUnwrap(host.create(config: ["device": "/dev/ttyACM0", "peers": ["abcd"]]))
        XCTAssertTrue(peers.contains("peers") && peers.contains("abcd"), peers)
        // The US 400 ms dwell: a full frame at SF7/125 kHz is on the air longer.
        let dwell = try XCTUnwrap(host.create(config: ["device": "/dev/ttyACM0", "spreading_factor": 7, "dwell_limit_ms": 400]))
        XCTAssertTrue(dwell.contains("dwell_limit_ms") && dwell.contains("SF7/125 kHz frames of 254 bytes take 416 ms"), dwell)
        XCTAssertNil(host.create(config: ["device": "/dev/ttyACM0", "spreading_factor": 7, "bandwidth_hz": 500_000, "dwell_limit_ms": 400]))
    }

    func testStatusSaysWhereTheDeviceIsAndWhatTheAirAllows() throws {
        let sim = try RNodeSimulator(["--devices", "1"])
        defer { sim.finish() }
        let host = try PluginTestHost(plugin: "lora")
        XCTAssertNil(host.create(config: ["device": sim.path(0), "spreading_factor": 7, "duty_cycle_percent": 1]))
        try host.start()
        defer { host.stop() }
        try Wait.until(timeout: 10, "the RNode is up") { (host.statusJSON()["state"] as? String) == "running" }
        let details = try XCTUnwrap(host.statusJSON()["details"] as? [String: Any])
        XCTAssertEqual(details["firmware"] as? String, "1.86")
        XCTAssertEqual(details["duty_cycle_percent"] as? String, "1.00")
        XCTAssertNotNil(details["duty_cycle_headroom_s"])
        XCTAssertNotNil(details["short_id"])
        try sim.command("unplug 0")
        try Wait.until(timeout: 10, "the unplug is reported") {
            let s = host.statusJSON()
            return (s["state"] as? String) == "unavailable" && ((s["reason"] as? String)?.contains("went away") ?? false)
        }
    }

    func testADeviceThatIsNotThereIsUnavailableNotFailed() throws {
        let host = try PluginTestHost(plugin: "lora")
        XCTAssertNil(host.create(config: ["device": NSTemporaryDirectory() + "no-such-tty-\(getpid())"]))
        try host.start()
        defer { host.stop() }
        try Wait.until(timeout: 10, "the missing device is reported") {
            let s = host.statusJSON()
            return (s["state"] as? String) == "unavailable" && ((s["reason"] as? String)?.contains("does not exist") ?? false)
        }
    }
}
