#!/usr/bin/env python3
"""Reticulum/LXMF on the line-of-four shape: A -> T1 -> T2 -> T3 -> T4 -> B.

The same shape as Plugins/Mesh/Tests/netns/bench-line.sh (four forwarding nodes in a chain,
a sender attached to the first, a receiver to the last, 200-byte messages all handed to
the sender first), run on Reticulum: four `rnsd` transport nodes joined by TCP on
loopback, T(i) a TCP client of T(i-1)'s server, A a client of T1, B a client of T4.
A and B are the peer bench's own roles (node.py, unchanged), opportunistic delivery, so
each message's delivery proof travels back through the four nodes as our receipts do.

Run it from a directory holding the peer bench (bench.py, node.py and its venv), as
Tests/bench/versus-reticulum-line.sh does. Env: N (2000), HOPS (4), LIMIT (300 s).
Prints one summary line beginning "reticulum line:" and writes results.json to RUN_DIR.
"""
import json, os, subprocess, sys, time

import bench  # the peer bench's helpers: spawn, stop, cleanup, proc_stats, wait_*, pct

N = int(os.environ.get("N", "2000"))
HOPS = int(os.environ.get("HOPS", "4"))
LIMIT = float(os.environ.get("LIMIT", "300"))


def config(d, transport, server_port=None, client_port=None):
    os.makedirs(d, exist_ok=True)
    ifaces = ""
    if server_port:
        ifaces += f"""  [[server]]
    type = TCPServerInterface
    enabled = yes
    listen_ip = 127.0.0.1
    listen_port = {server_port}
"""
    if client_port:
        ifaces += f"""  [[previous]]
    type = TCPClientInterface
    enabled = yes
    target_host = 127.0.0.1
    target_port = {client_port}
"""
    with open(os.path.join(d, "config"), "w") as f:
        f.write(f"""[reticulum]
  enable_transport = {"Yes" if transport else "No"}
  share_instance = No
  panic_on_interface_error = Yes
  respond_to_probes = No

[logging]
  loglevel = 2

[interfaces]
{ifaces}""")


def main():
    run_dir = os.environ.get("RUN_DIR") or os.path.join(bench.HERE, "runs", "line-" + time.strftime("%Y%m%d-%H%M%S"))
    d = os.path.join(run_dir, "line"); os.makedirs(d)
    ports = [bench.free_port() for _ in range(HOPS)]
    nodes = []
    try:
        for i in range(HOPS):
            config(os.path.join(d, f"T{i + 1}"), True, ports[i], ports[i - 1] if i else None)
            nodes.append(bench.spawn(f"T{i + 1}-rnsd", [bench.RNSD, "--config", os.path.join(d, f"T{i + 1}")], d))
            if not bench.wait_tcp(ports[i]):
                sys.exit(f"T{i + 1} did not listen")
        config(os.path.join(d, "A"), False, client_port=ports[0])
        config(os.path.join(d, "B"), False, client_port=ports[-1])
        subprocess.run([bench.PY, "-c", f"import RNS; RNS.Identity().to_file('{d}/B.identity')"], check=True)
        stopf = os.path.join(d, "STOP")
        B = bench.spawn("B-recv", [bench.PY, bench.NODE, "recv", "--rns", os.path.join(d, "B"), "--ident", f"{d}/B.identity",
                                   "--out", f"{d}/B.json", "--n", str(N), "--stopfile", stopf, "--announce"], d)
        if not bench.wait_file(f"{d}/B.json.ready", 60, [B]):
            sys.exit("B not ready (see B-recv.log)")
        dest = open(f"{d}/B.json.ready").read().strip()
        before = [bench.proc_stats(t.pid) for t in nodes]
        A = bench.spawn("A-send", [bench.PY, bench.NODE, "send", "--rns", os.path.join(d, "A"), "--dest", dest,
                                   "--out", f"{d}/A.json", "--n", str(N), "--method", "opportunistic", "--stopfile", stopf], d)
        deadline = time.time() + LIMIT
        while time.time() < deadline:
            if A.poll() is not None and B.poll() is not None:
                break
            # Everything received: give A a little time for the last delivery proofs.
            if B.poll() is not None and time.time() - os.path.getmtime(f"{d}/B.json") > 15:
                break
            time.sleep(0.2)
        timed_out = time.time() >= deadline
        with open(stopf, "w") as f: f.write("stop")
        for p in (A, B):
            try: p.wait(15)
            except subprocess.TimeoutExpired: pass
        after = [bench.proc_stats(t.pid) for t in nodes]
    finally:
        bench.cleanup()
    a = json.load(open(f"{d}/A.json")) if os.path.exists(f"{d}/A.json") else {}
    b = json.load(open(f"{d}/B.json")) if os.path.exists(f"{d}/B.json") else {}
    msgs = b.get("msgs", [])
    lat = [(rx - tx) * 1000 for _, tx, rx, _ in msgs]
    t0 = a.get("t0") or (min(tx for _, tx, _, _ in msgs) if msgs else 0)
    dur = (b["last_rx"] - t0) if b.get("last_rx") else None
    received = b.get("received", 0)
    res = {"hops": HOPS, "n": N, "received": received, "lost": N - received, "dups": b.get("dups"),
           "path_s": a.get("path_s"), "path_hops": a.get("hops"), "duration_s": dur,
           "msg_per_s": received / dur if dur else 0, "lat_p50_ms": bench.pct(lat, .5), "lat_p99_ms": bench.pct(lat, .99),
           "acked_at_A": a.get("acked"), "timed_out": timed_out,
           "T_cpu_s": [x.get("cpu", 0) - y.get("cpu", 0) for x, y in zip(after, before)],
           "T_VmHWM_kB": [x.get("VmHWM") for x in after]}
    json.dump(res, open(os.path.join(run_dir, "results.json"), "w"), indent=1)
    cpu = ", ".join(f"T{i + 1} {1000 * c / max(1, received):.2f}" for i, c in enumerate(res["T_cpu_s"]))
    hwm = ", ".join(f"{(k or 0) / 1024:.1f}" for k in res["T_VmHWM_kB"])
    print(f"reticulum line: {HOPS} transport nodes (path {res['path_hops']} hops), {received} of {N} received, "
          f"lost {res['lost']}, duplicated {res['dups']}, {res['msg_per_s']:.1f} msg/s end to end, "
          f"latency p50 {bench.fmt(res['lat_p50_ms'], 0)} ms p99 {bench.fmt(res['lat_p99_ms'], 0)} ms, "
          f"delivery proofs back at A {res['acked_at_A']}"
          + (" (TIMED OUT)" if timed_out else ""))
    print(f"reticulum line: CPU per message (ms): {cpu}; peak RSS (MB): {hwm}")


if __name__ == "__main__":
    main()
