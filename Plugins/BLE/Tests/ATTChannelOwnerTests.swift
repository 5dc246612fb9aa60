import XCTest
@testable import YaokBLEPlugin
@testable import YaokBluetooth

final class ATTChannelOwnerTests: XCTestCase {
    /// Lines as the 6.1 kernel printed them in the VM with l2test listening on CID 4.
    let list = """
    00:aa:01:00:00:00 (1) 00:00:00:00:00:00 (0) 4 0 0x0004 0x0000 672 672 1 0
    00:aa:01:00:00:00 (1) 00:00:00:00:00:00 (0) 4 0 0x0006 0x0000 672 672 1 0
    """

    func testListenerOnOurAddressIsFound() throws {
        let ours = try XCTUnwrap(BluetoothAddress(string: "00:AA:01:00:00:00"))
        let other = try XCTUnwrap(BluetoothAddress(string: "00:AA:01:01:00:01"))
        XCTAssertTrue(ATTChannelOwner.listenerPresent(in: list, address: ours))
        XCTAssertFalse(ATTChannelOwner.listenerPresent(in: list, address: other))
    }

    func testAnyAddressListenerCountsAndConnectedChannelsDoNot() throws {
        let ours = try XCTUnwrap(BluetoothAddress(string: "00:AA:01:00:00:00"))
        XCTAssertTrue(ATTChannelOwner.listenerPresent(
            in: "00:00:00:00:00:00 (1) 00:00:00:00:00:00 (0) 4 0 0x0004 0x0000 672 672 1 0", address: ours))
        // state 1 = connected: a link, not a listener
        XCTAssertFalse(ATTChannelOwner.listenerPresent(
            in: "00:aa:01:00:00:00 (1) 00:aa:01:01:00:01 (1) 1 0 0x0004 0x0004 672 672 1 0", address: ours))
        XCTAssertFalse(ATTChannelOwner.listenerPresent(in: "garbage\n\n1 2 3", address: ours))
    }

    func testProcessScanFindsNoBluetoothdHere() {
        // The build machine runs no bluetoothd; the scan must not invent one, and must find this process.
        XCTAssertFalse(ATTChannelOwner.processRunning(named: "bluetoothd-not-a-process", procRoot: "/proc"))
        let me = BluetoothKernel.readSmallFile("/proc/self/comm") ?? ""
        XCTAssertFalse(me.isEmpty)
        XCTAssertTrue(ATTChannelOwner.processRunning(named: me, procRoot: "/proc"))
    }
}
