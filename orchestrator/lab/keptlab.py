"""A lab kept up for a block of a sweep's cells, and the lab of one cell (kept up or fresh) behind one interface.

A block's cells share a lab configuration (orchestrator/model/sweep.py lab_key). Its lab comes up once, in
<bundle>/blocks/lab-NNN/ (broker configuration and PKI, the one capture, the block's own container logs), and
stays up while its cells run. Per cell, only what carries state is new: the broker PROCESS is restarted inside its
container (lab/broker.py restart_process), whose network namespace - and the capture sharing it - persists, so
sessions, retained messages, queues and the TLS session cache are the new process's; the subscriber is a new
process (a new connection and session) and so is the publisher, each started in its client container, which the
block keeps up (backends/kept_clients.py: they mount the folder of the run folders; a cell's command lines name its
own). The cell's run folder gets a copy of the lab's PKI and configuration. When the cell ends, its packets are cut
from the running capture into its own capture/capture.pcapng (lab/capture_split.py: by time and connection, every
packet in exactly one cell or in the block's gaps file), so the analysis reads a run folder as it does for a fresh
lab. The cut is checked as it is made; one that is not lossless marks the cell (lab.capture.split in its cell.json,
with a warning) and keeps the block's whole capture.

A failed or interrupted cell takes the block's lab down with it (its evidence saved first): the next cell brings a
fresh one up, in a new lab-NNN folder.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.backends import compose
from orchestrator.backends.compose import Topology
from orchestrator.backends.kept_clients import KeptClients
from orchestrator.lab.board_side import Exposure
from orchestrator.lab.broker import BROKER
from orchestrator.lab.capture_split import CaptureSplitter
from orchestrator.lab.pki import Pki
from orchestrator.lab.topology import (
    prepare_run_dir,
    running_lab,
    save_evidence,
    stop_capture,
    subscriber_args,
    topology,
    wait_subscribed,
)
from orchestrator.model.layout import SPLIT, Layout
from orchestrator.model.scenario import Scenario
from orchestrator.model.subscription import AT_QOS0, Subscription
from orchestrator.results.atomic import protect_secrets, read_json, write_json_atomic
from orchestrator.signals import sigint_deferred

CLIENTS = ("subscriber", "publisher")
CUT_WAIT_S = 10.0  # for dumpcap to write a packet from after the cell's end (3 s was short on a loaded CI host)
FRESH_FIRST = ["broker container and its network", "capture", "broker process", "subscriber", "publisher", "PKI"]
FRESH_EACH = ["broker process (sessions, retained messages, queues, TLS session cache and ticket keys)",
              "subscriber process (connection and session)", "publisher process (connection)"]
REUSED = ["broker container, its network namespace and the lab network", "capture (one per block, cut per cell)",
          "PKI and broker configuration (copied into the run folder)",
          "subscriber and publisher containers (each cell's programs started in them)"]


@dataclass
class CellLab:
    """The lab as one cell sees it: its run folder, PKI and topology, how its capture ends, and what says its
    subscriber has subscribed and nothing else runs beside the measurement (called once its publisher's program is
    started, before it is told to go: in a kept-up lab, the cell before's analysis has ended then)."""

    lay: Layout
    pki: Pki | None
    topo: Topology
    end_capture: Callable[[], None]
    ready: Callable[[], object] = lambda: None


@contextmanager
def fresh_cell_lab(scenario: Scenario, run_dir: Path, *, sub: Subscription = AT_QOS0,
                   exposure: Exposure | None = None) -> Iterator[CellLab]:
    """The whole lab up for this cell alone and down after it (running_lab)."""
    with running_lab(scenario, run_dir, sub=sub, exposure=exposure) as (lay, pki, topo):
        yield CellLab(lay, pki, topo, stop_capture)


def _closing_can_come() -> bool:
    """The stopped subscriber's closing segments can still reach the capture: its container, the broker's (whose
    network namespace the capture shares) and the capture's all run."""
    running = {c.service for c in compose.containers() if c.state.running}
    return {BROKER.service, "capture", "subscriber"} <= running


class KeptLab:
    """The lab of one block, up from its first cell to its last (or to a cell that failed)."""

    def __init__(self, blocks: Path, before_publish: Callable[[], object] = lambda: None) -> None:
        self.blocks = blocks
        self.before_publish = before_publish  # the sweep's: the cell before's analysis, which runs meanwhile, done
        self.lay: Layout | None = None
        self.pki: Pki | None = None
        self.topo: Topology | None = None
        self.splitter: CaptureSplitter | None = None
        self.served = 0
        self.facts: dict[str, Any] = {}
        self.clients: KeptClients | None = None  # the subscriber's and publisher's containers, from the first cell

    def _up(self, scenario: Scenario, sub: Subscription, runs: Path) -> None:
        """The broker and the capture up; the clients' containers (mounting ``runs``, the folder of the cells' run
        folders) made while those two become healthy."""
        n = 1 + sum(1 for p in self.blocks.glob("lab-*") if p.is_dir()) if self.blocks.is_dir() else 1
        lay, pki = prepare_run_dir(self.blocks / f"lab-{n:03d}", scenario, websocket=sub.websocket, build=sub.build)
        topo = compose.with_host_port(topology(scenario, lay, sub=sub), fixed=False)  # a free port, as a run's
        self.lay, self.pki, self.topo, self.served = lay, pki, topo, 0
        self.splitter = CaptureSplitter(lay.capture, lay.capture.parent / "gaps.pcapng")
        clients = self.clients = KeptClients(runs)
        compose.up(topo, services=("broker", "capture"), meanwhile=lambda: clients.prepare(topo))

    @contextmanager
    def cell(self, scenario: Scenario, run_dir: Path, *, sub: Subscription = AT_QOS0) -> Iterator[CellLab]:
        """This cell's share of the lab: the lab brought up (first cell) or its broker process restarted, a new
        subscriber program on the cell's run folder (the publisher's is started through the topology, ``kept``);
        afterwards the subscriber stopped and the cell's evidence saved and its packets cut. Any exception takes the
        whole lab down."""
        start = time.time()
        restart_s = None
        try:
            if self.lay is None:
                self._up(scenario, sub, run_dir.parent)
            else:
                BROKER.restart_process()  # the cell before's programs have ended
                restart_s = time.time() - start  # the restart command's: until the new process listens
                start = time.time()  # the old clients' last segments and the restart are before the window
            assert self.lay is not None and self.topo is not None
            lay, pki = prepare_run_dir(run_dir, scenario, pki_from=self.lay.pki,  # the lab's PKI, in the cell's folder
                                       websocket=sub.websocket, build=sub.build)
            assert self.clients is not None  # made with the lab
            topo = replace(self.topo, run_dir=lay.root, subscriber_args=subscriber_args(scenario, lay, sub),
                           kept=self.clients)
            self.facts = self._facts() | ({"broker_restart_s": round(restart_s, 3)} if restart_s is not None else {})
            compose.start_service(topo, "subscriber")
            # the publisher's program may start while the subscriber subscribes (it waits for its go)
            ends: list[float] = []
            yield CellLab(lay, pki, topo, lambda: ends.append(time.time()),
                          lambda: (self.before_publish(), wait_subscribed(lay)))
            self.served += 1
        except BaseException:
            self.down(Layout(run_dir))
            raise
        finally:
            with sigint_deferred():
                if self.lay is not None and self.clients is not None:
                    self.clients.signal("subscriber")  # after the end: its last segments are the cut's proof
                    with ThreadPoolExecutor(max_workers=1) as pool:  # the broker's log and the states meanwhile
                        evidence = pool.submit(save_evidence, Layout(run_dir), own_logs=CLIENTS)
                        if ends:  # the subscriber's last segments, after the end: the capture has all before it
                            self._cut(Layout(run_dir), start, ends[0])
                        self.facts["programs"] = {s: self.clients.stop(s) for s in CLIENTS}  # their exit codes
                        evidence.result()
                protect_secrets(run_dir)

    def _facts(self) -> dict[str, Any]:
        assert self.lay is not None
        first = self.served == 0
        return {"mode": "kept-up", "folder": f"{self.blocks.name}/{self.lay.root.name}", "cell_in_lab": self.served + 1,
                "fresh": FRESH_FIRST if first else FRESH_EACH, "reused": [] if first else REUSED}

    def _cut(self, lay: Layout, start: float, end: float) -> None:
        """The cell's packets, from its start to its end, out of the running capture into its capture.pcapng.
        dumpcap writes the file in bursts: the cut waits (at most CUT_WAIT_S) until a packet from after the end is in
        it, as the stopped subscriber's closing segments soon are, or until the subscriber's, the broker's or the
        capture's container is no longer running (a failed cell's: none will come). When none came, ``complete`` is
        false and the cell warns: the cell's last packets may be in the block's gaps (counted there), not in its
        capture. ``split`` is the cut's check (capture_split.py Cut.check): when it is not lossless, the cell warns
        and the block's whole capture is kept."""
        assert self.splitter is not None
        began = time.monotonic()
        looked = began  # a dead container sends or captures no later packet: looked at each 0.5 s after the first
        while not (complete := self.splitter.seen_after(end)) and (now := time.monotonic()) < began + CUT_WAIT_S:
            if now - looked >= 0.5:
                looked = now
                if not _closing_can_come():
                    break
            time.sleep(0.02)
        cut = self.splitter.cut(lay.root.name, start, end, lay.capture)
        self.facts["capture"] = {"cut_from": f"{self.facts['folder']}/capture/capture.pcapng",
                                 "window_s": round(end - start, 3), "packets": cut.packets, "complete": complete,
                                 "window_packets_to_gaps": cut.to_gaps, "split": cut.check(),
                                 "rule": "a packet is the cell's when its time is in the cell's window and its TCP "
                                         "connection began in it; every other goes to the block's gaps.pcapng"}

    def down(self, evidence_too: Layout | None = None) -> None:
        """Stop the capture (flushed), send what no cell had to the gaps, record the split, save every container's
        log into the lab folder (and ``evidence_too``: a failed cell's), take the containers down. Safe twice."""
        if self.lay is None:
            return
        lay, splitter = self.lay, self.splitter
        self.lay = None
        began = time.monotonic()
        with sigint_deferred():
            try:
                if evidence_too is not None:  # its clients' logs are their programs' own, already in its logs/
                    save_evidence(evidence_too, own_logs=CLIENTS)
                save_evidence(lay, own_logs=CLIENTS)
                clients, self.clients = self.clients, None
                with ThreadPoolExecutor(max_workers=1) as pool:  # their containers go while the capture flushes
                    removed = pool.submit(clients.remove) if clients is not None else None
                    stop_capture()
                    if removed is not None:
                        removed.result()
                if splitter is not None:
                    write_json_atomic(lay.root / SPLIT, {"cells_served": self.served, **splitter.finish()})
            finally:
                compose.down()
                shutil.rmtree(lay.pki, ignore_errors=True)  # every cell keeps its copy; the lab's goes with it
                split = read_json(lay.root / SPLIT)
                if split:  # the lab's own teardown, which no cell's timings hold (bench/sweep.py adds it)
                    write_json_atomic(lay.root / SPLIT, {**split, "down_s": round(time.monotonic() - began, 3)})
                if (split or {}).get("lossless"):
                    lay.capture.unlink(missing_ok=True)  # every packet of it is in a cell's capture or the gaps
                protect_secrets(lay.root)
