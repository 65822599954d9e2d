"""The paho-mqtt loader bench/fleet_loader.py compares ours with: N paho clients in one Python process,
run as `python bench/fleet_loader.py --paho-worker CONFIG` (its CPU is that process's)."""

from __future__ import annotations

import heapq
import json
import random
import resource
import selectors
import time
from pathlib import Path

from loader_common import CHACHA_OPENSSL, read_proc


def payload(device: str, seq: int, t_us: int, size: int, rng: random.Random) -> bytes:
    """The testbed payload (firmware/platformio/README.md "The payload") of exactly `size` bytes."""
    core = (f'{{"d":"{device}","n":{seq},"t":{t_us},"s":[0,{rng.randint(3900, 4000)},{rng.randint(600, 700)},'
            f'{rng.randint(200, 400)}]')
    rest = size - len(core) - 1
    return (core + (f',"x":"{"x" * (rest - 7)}"' if rest >= 7 else " " * rest) + "}").encode()


class PahoFleet:
    """N paho clients in one selector loop: each connects at its slot + offset, publishes S messages one
    interval apart after its CONNACK, then DISCONNECTs."""

    def __init__(self, cfg: dict) -> None:
        import ssl

        import paho.mqtt.client as mqtt

        self.mqtt, self.cfg, self.rng = mqtt, cfg, random.Random(1)
        self.sel, self.n_events, self.done = selectors.DefaultSelector(), 0, 0
        self.heap: list[tuple[float, int, str, int, int]] = []
        self.clients: dict[int, mqtt.Client] = {}
        self.writing: dict[int, bool] = {}
        self.t0: dict[int, float] = {}
        self.send_us: list[int] = []
        self.lag_us: list[int] = []
        self.errors: list[str] = []
        self.tls = None
        if cfg["tls"]:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.tls.load_verify_locations(cfg["ca"])
            self.tls.set_ciphers(CHACHA_OPENSSL)
            self.tls.maximum_version = ssl.TLSVersion.TLSv1_2

    def push(self, due: float, kind: str, i: int, k: int = 0) -> None:
        self.n_events += 1
        heapq.heappush(self.heap, (due, self.n_events, kind, i, k))

    def on_connect(self, c, i: int, flags, rc, props) -> None:
        if rc == 0:
            self.t0[i] = time.monotonic()
            self.push(self.t0[i], "publish", i, 0)
        else:
            self.errors.append(f"p{i:04d}: CONNACK {rc}")
            self.done += 1

    def want_write(self, i: int) -> None:
        c = self.clients[i]
        sock = c.socket()
        if sock is not None and c.want_write() != self.writing[i]:
            self.writing[i] = c.want_write()
            self.sel.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if self.writing[i] else 0), i)  # type: ignore[arg-type]

    def connect(self, i: int) -> None:
        c = self.mqtt.Client(self.mqtt.CallbackAPIVersion.VERSION2, client_id=f"p{i:04d}", userdata=i)
        c.on_connect = self.on_connect
        c.on_socket_close = lambda client, u, sock: self.sel.unregister(sock) and None  # type: ignore[arg-type]
        if self.tls is not None:
            c.tls_set_context(self.tls)
        self.clients[i], self.writing[i] = c, False
        try:
            c.connect("127.0.0.1", self.cfg["port"], keepalive=60)  # TCP + TLS handshake (blocking), CONNECT sent
            self.sel.register(c.socket(), selectors.EVENT_READ, i)  # type: ignore[arg-type]
            self.want_write(i)
        except (OSError, ValueError) as e:
            self.errors.append(f"p{i:04d}: {e}")
            self.done += 1

    def publish(self, i: int, k: int) -> None:
        c, due, now_us = self.clients[i], self.t0[i] + k * self.cfg["interval_s"], time.time_ns() // 1000
        if k > 0:  # as fleet's steady lag: lateness after the first message
            self.lag_us.append(int((time.monotonic() - due) * 1e6))
        info = c.publish(self.cfg["topic"], payload(f"p{i:04d}", k, now_us, self.cfg["payload"], self.rng), qos=0)
        if info.rc == 0:
            self.send_us.append(now_us)
        if k + 1 < self.cfg["samples"]:
            self.push(due + self.cfg["interval_s"], "publish", i, k + 1)
            self.want_write(i)
        else:
            c.disconnect()  # written at once; paho closes the socket after it
            self.done += 1

    def run(self) -> None:
        t_base, n = time.monotonic() + 0.01, self.cfg["devices"]
        for i in range(n):
            self.push(t_base + i / self.cfg["rate"] + self.rng.random() * self.cfg["interval_s"], "connect", i)
        while self.done < n:
            while self.heap and self.heap[0][0] <= time.monotonic():
                _, _, kind, i, k = heapq.heappop(self.heap)
                self.connect(i) if kind == "connect" else self.publish(i, k)
            timeout = min(0.5, max(0.0, self.heap[0][0] - time.monotonic())) if self.heap else 0.5
            for key, mask in self.sel.select(timeout):
                c = self.clients[key.data]
                if mask & selectors.EVENT_READ:
                    c.loop_read()
                if mask & selectors.EVENT_WRITE and c.socket() is not None:
                    c.loop_write()
                    self.want_write(key.data)


def paho_worker(cfg: dict) -> int:
    import ssl  # noqa: F401  (the imports are the interpreter's start-up, not the loader's work)

    import paho.mqtt.client  # noqa: F401

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    fleet = PahoFleet(cfg)
    fleet.run()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    hwm = [int(x.split()[1]) for x in read_proc("/proc/self/status").splitlines() if x.startswith("VmHWM:")]
    Path(cfg["report"]).write_text(json.dumps({
        "user_s": ru.ru_utime - ru0.ru_utime, "sys_s": ru.ru_stime - ru0.ru_stime, "messages": len(fleet.send_us),
        "send_us": fleet.send_us, "steady_lag_us": fleet.lag_us, "errors": fleet.errors,
        "vmhwm_kb": hwm[0] if hwm else ru.ru_maxrss}))
    return 0
