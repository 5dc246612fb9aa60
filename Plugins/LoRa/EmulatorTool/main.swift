// yaok-rnode-sim: emulated RNodes on pseudo-terminals, sharing one simulated LoRa channel
// (Plugins/LoRa/README.md). A hub opens DIR/rnodeK as it would /dev/ttyACM0.
//
//   yaok-rnode-sim --dir DIR --devices N [--range 0-1,1-2] [--loss 0.05] [--seed S]
//                  [--silent K] [--firmware K=1.40]
//
// --range lists the pairs that hear each other (both ways; default: every pair). It prints
// `ready` once the devices exist, then one line per event (`tx K n=BYTES airtime=S`, `rx K
// from=J n=BYTES`), and reads commands on stdin: `unplug K`, `plug K`, `garbage K`, `quit`
// (also on end of input). Last line: `stats tx=… rx=… collisions=… lost=…`.
import Foundation
import Glibc
import YaokLoRaPlugin
import YaokRNodeEmulator

setvbuf(stdout, nil, _IOLBF, 0)

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("yaok-rnode-sim: \(message)\n".utf8))
    exit(2)
}

var args = Array(CommandLine.arguments.dropFirst())
func take(_ name: String) -> String? {
    guard let i = args.firstIndex(of: name) else { return nil }
    guard i + 1 < args.count else { fail("\(name) needs a value") }
    defer { args.removeSubrange(i...(i + 1)) }
    return args[i + 1]
}
guard let dir = take("--dir") else { fail("--dir DIR is required") }
guard let count = take("--devices").flatMap(Int.init), (1...64).contains(count) else { fail("--devices N (1-64) is required") }
let loss = take("--loss").flatMap(Double.init) ?? 0
let seed = take("--seed").flatMap(UInt64.init) ?? 1
var inRange: [Int: Set<Int>] = [:]
if let pairs = take("--range") {
    for pair in pairs.split(separator: ",") {
        let ends = pair.split(separator: "-").compactMap { Int($0) }
        guard ends.count == 2, ends.allSatisfy({ (0..<count).contains($0) }) else { fail("bad --range pair \(pair)") }
        inRange[ends[0], default: []].insert(ends[1])
        inRange[ends[1], default: []].insert(ends[0])
    }
} else {
    for a in 0..<count { inRange[a] = Set(0..<count).subtracting([a]) }
}
var devices = (0..<count).map { EmulatedRNode(index: $0) }
while let k = take("--silent").flatMap(Int.init) { if (0..<count).contains(k) { devices[k].fault = .silent } }
while let spec = take("--firmware") {
    let parts = spec.split(separator: "=")
    let version = parts.count == 2 ? parts[1].split(separator: ".").compactMap { UInt8($0) } : []
    guard parts.count == 2, let k = Int(parts[0]), (0..<count).contains(k), version.count == 2 else { fail("bad --firmware \(spec)") }
    devices[k].fault = .firmware(major: version[0], minor: version[1])
}
guard args.isEmpty else { fail("unknown arguments \(args)") }

/// One device's pseudo-terminal: the master is ours; the slave stays open here too, in raw
/// mode, so nothing the emulator writes is echoed back before a host sets the line up.
struct Port {
    var master: Int32
    var slave: Int32
}

func openPort(_ k: Int) -> Port {
    // What posix_openpt, unlockpt and ptsname do on Linux (Glibc's Swift module leaves them out):
    // a new master from /dev/ptmx, unlocked (TIOCSPTLCK 0), its slave's number (TIOCGPTN).
    let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
    var unlock: Int32 = 0, number: UInt32 = 0
    guard master >= 0, ioctl(master, 0x4004_5431, &unlock) == 0, ioctl(master, 0x8004_5430, &number) == 0 else {
        fail("cannot make a pseudo-terminal: errno \(errno)")
    }
    let path = "/dev/pts/\(number)"
    let slave = open(path, O_RDWR | O_NOCTTY)
    guard slave >= 0 else { fail("cannot open \(path)") }
    var t = termios()
    tcgetattr(slave, &t)
    cfmakeraw(&t)
    tcsetattr(slave, TCSANOW, &t)
    _ = fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK)
    let link = "\(dir)/rnode\(k)"
    unlink(link)
    guard symlink(path, link) == 0 else { fail("cannot link \(link) to \(path)") }
    return Port(master: master, slave: slave)
}

func closePort(_ p: Port, _ k: Int) {
    close(p.master)
    close(p.slave)
    unlink("\(dir)/rnode\(k)")
}

/// Writes to a device's line what the line takes now; a host that does not read (gone, or
/// stuck) loses the rest, as with a real device's full USB buffer. Never waits: one device's
/// host must not stall the air for the others.
func write(_ bytes: [UInt8], to fd: Int32) {
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return }
        offset += n
    }
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

var ports: [Port?] = (0..<count).map { openPort($0) }
var air = SimulatedAir(inRange: inRange, loss: loss, seed: seed)
var sent = 0, heard = 0
var buffer = [UInt8](repeating: 0, count: 4096)
var commandLine = ""
print("ready")

loop: while true {
    var fds = [pollfd(fd: 0, events: Int16(POLLIN), revents: 0)]
    var owners = [-1]
    for (k, p) in ports.enumerated() {
        if let p { fds.append(pollfd(fd: p.master, events: Int16(POLLIN), revents: 0)); owners.append(k) }
    }
    _ = poll(&fds, nfds_t(fds.count), 10)
    let t = now()
    for (i, fd) in fds.enumerated() where fd.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
        if owners[i] < 0 {
            let n = read(0, &buffer, buffer.count)
            if n <= 0 { break loop }
            commandLine += String(decoding: buffer[0..<n], as: UTF8.self)
            while let nl = commandLine.firstIndex(of: "\n") {
                let words = commandLine[..<nl].split(separator: " ")
                commandLine.removeSubrange(...nl)
                guard let verb = words.first else { continue }
                let k = words.count > 1 ? Int(words[1]) ?? -1 : -1
                switch verb {
                case "quit": break loop
                case "unplug" where (0..<count).contains(k):
                    if let p = ports[k] { closePort(p, k); ports[k] = nil }
                    devices[k] = EmulatedRNode(index: k, fault: devices[k].fault)
                    print("unplugged \(k)")
                case "plug" where (0..<count).contains(k) && ports[k] == nil:
                    ports[k] = openPort(k)
                    write(EmulatedRNode.bootFrame, to: ports[k]!.master)
                    print("plugged \(k)")
                case "garbage" where (0..<count).contains(k):
                    if let p = ports[k] { write((0..<64).map { _ in UInt8.random(in: 0...255) }, to: p.master) }
                default: print("unknown command \(words.joined(separator: " "))")
                }
            }
            continue
        }
        let k = owners[i]
        guard let p = ports[k] else { continue }
        let n = read(p.master, &buffer, buffer.count)
        guard n > 0 else { continue }
        let (reply, packets) = devices[k].fromHost(Array(buffer[0..<n]))
        if !reply.isEmpty { write(reply, to: p.master) }
        for packet in packets {
            guard let channel = devices[k].channel else { continue }
            air.queue(from: k, bytes: packet, channel: channel, at: t)
        }
    }
    for tx in air.startWaiting(at: now()) {
        sent += 1
        print("tx \(tx.sender) n=\(tx.bytes.count) airtime=\(String(format: "%.3f", tx.end - tx.start))")
    }
    for r in air.receptions(until: now()) {
        guard let p = ports[r.receiver] else { continue }
        let bytes = devices[r.receiver].received(r)
        guard !bytes.isEmpty else { continue }
        write(bytes, to: p.master)
        heard += 1
        print("rx \(r.receiver) n=\(r.bytes.count)")
    }
}
for (k, p) in ports.enumerated() { if let p { closePort(p, k) } }
print("stats tx=\(sent) rx=\(heard) collisions=\(air.collisions) lost=\(air.lost)")
