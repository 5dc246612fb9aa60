import XCTest
@testable import YaokBluetooth
@testable import YaokEndpoint

final class BLEHubTargetTests: XCTestCase {
    func testAddressForms() throws {
        let a = try XCTUnwrap(BluetoothAddress(string: "00:AA:01:00:00:23"))
        XCTAssertEqual(try BLEHubTarget.parse("hci1/00:aa:01:00:00:23"), BLEHubTarget(adapter: "hci1", address: a))
        XCTAssertEqual(try BLEHubTarget.parse("00:AA:01:00:00:23"), BLEHubTarget(adapter: "hci0", address: a))
        let r = try BLEHubTarget.parse("hci2/00:AA:01:00:00:23?type=random&mtu=23")
        XCTAssertEqual(r, BLEHubTarget(adapter: "hci2", address: a, randomAddress: true, mtu: 23))
        XCTAssertEqual(r.description, "ble://hci2/00:AA:01:00:00:23?type=random&mtu=23")
        XCTAssertEqual(try BLEHubTarget.parse(String(r.description.dropFirst(6))), r, "description parses back")
        XCTAssertEqual(try BLEHubTarget.parse("hci0/00:AA:01:00:00:23?type=public").description, "ble://hci0/00:AA:01:00:00:23")
    }

    func testBadAddressesAreSpecific() {
        func error(_ text: String) -> String {
            do { _ = try BLEHubTarget.parse(text); return "parsed" } catch { return "\(error)" }
        }
        XCTAssertTrue(error("hci1/00:AA:01:00:00").contains("is not a Bluetooth address"), error("hci1/00:AA:01:00:00"))
        XCTAssertTrue(error("usb1/00:AA:01:00:00:23").contains("\"usb1\" is not an adapter name"))
        XCTAssertTrue(error("a/b/c").contains("is not of the form ble://"))
        XCTAssertTrue(error("hci1/00:AA:01:00:00:23?mtu=600").contains("bad option \"mtu=600\""))
        XCTAssertTrue(error("hci1/00:AA:01:00:00:23?mtu=22").contains("bad option"))
        XCTAssertTrue(error("hci1/00:AA:01:00:00:23?type=static").contains("bad option \"type=static\""))
        XCTAssertTrue(error("").contains("not a Bluetooth address"))
    }
}
