import XCTest
import Glibc
@testable import YaokBLEPlugin
@testable import YaokBluetooth

/// Runs on the build machine, which has no usable Bluetooth: the reason must be the specific one.
final class AdapterProbeTests: XCTestCase {
    func testProbeGivesTheSpecificReasonOnThisMachine() throws {
        let fd = socket(31, Int32(SOCK_RAW.rawValue), 1)
        let socketErrno = errno
        if fd >= 0 { close(fd) }
        let result = BLEAdapterProbe.probe(name: "hci0", index: 0, bringUp: false)
        if fd < 0 && socketErrno == EAFNOSUPPORT {
            XCTAssertEqual(result, .failure(.noKernelSupport))
            if case .failure(let why) = result {
                XCTAssertTrue(why.description.contains("EAFNOSUPPORT"), why.description)
            }
        } else if BluetoothKernel.presentAdapters().isEmpty {
            XCTAssertEqual(result, .failure(.noAdapter(adapter: "hci0", present: [])))
        } else {
            throw XCTSkip("this machine has a Bluetooth adapter; the VM test covers that case")
        }
    }

    func testMissingAdapterListsPresentOnes() {
        // hci9999 never exists; the reason must name it (or say the kernel lacks Bluetooth).
        let result = BLEAdapterProbe.probe(name: "hci9999", index: 9999, bringUp: false)
        switch result {
        case .failure(.noKernelSupport): break
        case .failure(.noAdapter(let adapter, _)): XCTAssertEqual(adapter, "hci9999")
        default: XCTFail("unexpected \(result)")
        }
    }

    func testReasonTextsSayWhatToDo() {
        let inUse = BLEUnavailableReason.attChannelInUse(adapter: "hci1").description
        XCTAssertTrue(inUse.contains("bluetoothd is running on hci1"), inUse)
        XCTAssertTrue(inUse.contains("systemctl stop bluetooth"), inUse)
        XCTAssertTrue(BLEUnavailableReason.missingCapability(operation: "bring hci0 up", capability: "CAP_NET_ADMIN")
            .description.contains("CAP_NET_ADMIN"))
        XCTAssertTrue(BLEUnavailableReason.rfkillBlocked(adapter: "hci0", hard: false).description.contains("rfkill unblock"))
        XCTAssertTrue(BLEUnavailableReason.noAdapter(adapter: "hci0", present: ["hci1"]).description.contains("present: hci1"))
        XCTAssertTrue(BLEUnavailableReason.adapterDown(adapter: "hci0", error: Errno(EIO)).description.contains("cannot be brought up"))
    }

    func testErrnoClassification() {
        XCTAssertEqual(BLEAdapterProbe.classifySocketError(Errno(EAFNOSUPPORT), operation: "x", capability: "CAP_NET_RAW"), .noKernelSupport)
        XCTAssertEqual(BLEAdapterProbe.classifySocketError(Errno(EPERM), operation: "x", capability: "CAP_NET_RAW"),
                       .missingCapability(operation: "x", capability: "CAP_NET_RAW"))
        XCTAssertEqual(BLEAdapterProbe.classifySocketError(Errno(EIO), operation: "x", capability: "CAP_NET_RAW"),
                       .systemCall(operation: "x", error: Errno(EIO)))
    }

    func testBluetoothAddress() {
        let a = BluetoothAddress(string: "00:aa:01:00:00:23")
        XCTAssertEqual(a?.description, "00:AA:01:00:00:23")
        XCTAssertEqual(a.map { BluetoothAddress(kernel: $0.kernelValue) }, a)
        XCTAssertEqual(a?.kernelValue.b.0, 0x23)   // the kernel's order is little-endian
        XCTAssertNil(BluetoothAddress(string: "00:aa:01:00:00"))
        XCTAssertNil(BluetoothAddress(string: "00:aa:01:00:00:zz"))
        XCTAssertNil(BluetoothAddress(bytes: [1, 2, 3]))
    }
}
