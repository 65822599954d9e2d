"""Every traffic role of the delay line's tests and bench, run inside a network namespace (standard library only).

Used by tests/unit/test_delayline_netns.py and bench/impairment.py. UDP packets carry (seq, CLOCK_REALTIME ns).
  echo PORT                          echo every datagram
  rtt HOST PORT COUNT [TIMEOUT_S]    sequential round trips -> {"rtt_ms": [...], "lost": n}
  recv PORT IDLE_S                   (seq, sent ns, kernel receive ns) until idle
  send HOST PORT COUNT INTERVAL_S    paced by deadlines
  flood HOST PORT SECONDS PPS        0 pps: as fast as possible -> {"sent", "seconds"}
  sink PORT / bulk HOST PORT BYTES   one TCP transfer -> {"bytes", "seconds"} from the sink
"""

import json
import socket
import struct
import sys
import time

HDR = struct.Struct("!IQ")


def udp() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def echo(port: str) -> None:
    s = udp()
    s.bind(("0.0.0.0", int(port)))
    print("ready", flush=True)
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)


def rtt(host: str, port: str, count: str, timeout_s: str = "1.0") -> None:
    s = udp()
    s.connect((host, int(port)))
    s.settimeout(float(timeout_s))
    rtts, lost = [], 0
    for i in range(int(count)):
        t = time.perf_counter_ns()
        s.send(HDR.pack(i, 0))
        try:
            while HDR.unpack(s.recv(2048)[:12])[0] != i:
                pass
            rtts.append((time.perf_counter_ns() - t) / 1e6)
        except TimeoutError:
            lost += 1
    print(json.dumps({"rtt_ms": rtts, "lost": lost}))


def recv(port: str, idle_s: str) -> None:
    s = udp()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS: the kernel's receive time
    s.bind(("0.0.0.0", int(port)))
    s.settimeout(60)
    rows = []
    print("ready", flush=True)
    try:
        while True:
            data, anc, _, _ = s.recvmsg(2048, 64)
            sec, nsec = struct.unpack("qq", anc[0][2][:16]) if anc else divmod(time.time_ns(), 10**9)
            rows.append((*HDR.unpack(data[:12]), sec * 10**9 + nsec))
            s.settimeout(float(idle_s))
    except TimeoutError:
        pass
    print(json.dumps(rows))


def send(host: str, port: str, count: str, interval_s: str) -> None:
    s = udp()
    s.connect((host, int(port)))
    pad = bytes(20)
    t0 = time.perf_counter()
    for i in range(int(count)):
        ahead = t0 + i * float(interval_s) - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        s.send(HDR.pack(i, time.time_ns()) + pad)
    print(json.dumps({"sent": int(count), "seconds": time.perf_counter() - t0}))


def flood(host: str, port: str, seconds: str, pps_text: str) -> None:
    s = udp()
    s.connect((host, int(port)))
    pps, payload, n = float(pps_text), bytes(32), 0
    t0 = time.perf_counter()
    end = t0 + float(seconds)
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if pps and n >= (now - t0) * pps:
            time.sleep(min(0.0005, max(0.0, t0 + n / pps - now)))
            continue
        try:
            s.send(payload)
            n += 1
        except OSError:
            pass
    print(json.dumps({"sent": n, "seconds": time.perf_counter() - t0}))


def sink(port: str) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", int(port)))
    srv.listen(1)
    print("ready", flush=True)
    conn, _ = srv.accept()
    t0, total = time.perf_counter(), 0
    while True:
        data = conn.recv(1 << 16)
        if not data:
            break
        total += len(data)
    t1 = time.perf_counter()
    conn.sendall(b"ok")
    conn.close()
    print(json.dumps({"bytes": total, "seconds": t1 - t0}))


def bulk(host: str, port: str, nbytes: str) -> None:
    s = socket.create_connection((host, int(port)), timeout=120)
    left, chunk = int(nbytes), bytes(1 << 16)
    while left > 0:
        s.sendall(chunk[:min(left, len(chunk))])
        left -= len(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(2)
    s.close()


if __name__ == "__main__":
    {"echo": echo, "rtt": rtt, "recv": recv, "send": send, "flood": flood, "sink": sink, "bulk": bulk}[
        sys.argv[1]](*sys.argv[2:])
