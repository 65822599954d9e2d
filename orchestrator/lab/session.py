"""`testbed up / status / down`: a long-lived topology in the state folder's session/ (.testbed/session/ of a
checkout, else ~/.local/state/testbed/session: orchestrator/paths.py), in the user's session project.

`up` and `down` work on compose project testbed-<user>-session (compose.use_session()); a `run` or `sweep`
has a project of its own, so it neither meets nor removes the session. `down` also removes what this
user's crashed invocations left, and names the live ones it leaves alone (compose.reap()).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchestrator.backends import compose, docker
from orchestrator.backends.images import missing_images
from orchestrator.backends.impairment import (
    ImpairmentTarget,
    apply,
    check_supported,
    clear,
    targets_for_containers,
)
from orchestrator.errors import TestbedError
from orchestrator.lab.board_side import with_auth
from orchestrator.lab.topology import TOPIC, prepare_run_dir, save_evidence, topology, wait_subscribed
from orchestrator.model.axes import NO_IMPAIRMENT
from orchestrator.model.impairment import Direction, Impairment, load_impairment
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import load_scenario
from orchestrator.paths import state_dir
from orchestrator.results.atomic import read_json, write_json_atomic


def session_dir() -> Path:
    return state_dir() / "session"


def up(scenario_name: str, *, expose: bool = False, host_port: int | None = None, impairment_name: str = NO_IMPAIRMENT,
       progress: Callable[[str], None] = lambda _m: None) -> list[str]:
    scenario = load_scenario(scenario_name)  # bad input fails before anything touches docker
    impairment = load_impairment(impairment_name)
    if not impairment.is_noop and impairment.direction.covers(Direction.PUBLISHER_TO_BROKER):
        raise TestbedError(
            f"impairment {impairment.name} acts on the publisher->broker link, and `testbed up` runs no publisher",
            hint="use it with `testbed run`/`sweep` (virtual ESP32), or on a router between a real ESP32 and "
                 "the broker (docs/multi-host.md); `up` takes broker->subscriber profiles")
    check_supported(impairment)
    docker.engine_version()
    docker.compose_command()
    missing = missing_images(compose.CORE_SERVICES)
    if missing:
        raise TestbedError(f"images not built: {', '.join(missing)}", hint="testbed images build")
    name = compose.use_session()
    running = [c for c in compose.containers() if c.state.running]
    if running:
        files = next((m for c in running for m in c.mounts if m), "?")
        raise TestbedError(f"your testbed session is already running (project {name}, files in {files})",
                           hint="`testbed status` shows it; `testbed down` stops it")
    baseline = scenario
    if expose:  # reachable beyond loopback: no anonymous clients, only the publisher user writes the topic
        scenario = with_auth(scenario)
    lay, pki = prepare_run_dir(session_dir(), scenario, acl=expose)
    topo = compose.with_host_port(topology(scenario, lay, host_port=host_port, expose=expose), fixed=True)
    progress(f"starting broker, capture and subscriber for scenario {scenario.name}")
    try:
        compose.up(topo)
        st = wait_subscribed(lay)
        impairment_line = _apply_session_impairment(impairment)
    except BaseException:
        try:
            save_evidence(lay)  # logs/<service>.log and logs/containers.json in the session folder
        finally:
            compose.down()
        raise
    (session_dir() / "session.json").write_text(json.dumps(
        {"scenario": scenario.name, "port": scenario.port, "host_port": topo.host_port, "bind": topo.bind}))
    lines = [f"scenario {scenario.name}: broker on {topo.bind}:{topo.host_port} "
             f"({'TLS' if scenario.is_tls else 'plaintext'}), capture running, subscriber subscribed"]
    if scenario.is_tls:
        suite = scenario.expected_suite()
        tls = st.get("tls")
        tls = tls if isinstance(tls, dict) else {}
        lines.append(f"subscriber negotiated {tls.get('version')} {tls.get('cipher')} "
                     f"(scenario expects {suite.openssl if suite else '?'})")
        lines.append(f"CA certificate for clients: {pki.ca_cert if pki else '-'}")
    if expose:
        lines.append(f"--expose: the broker port {topo.host_port} is published on ALL interfaces of this host")
        lines.extend(_exposure_lines(baseline.anonymous, scenario.tls is not None
                                     and scenario.tls.client_auth == "certificate", lay))
    if impairment_line:
        lines.append(impairment_line)
    lines.append(f"files: {lay.root}  (capture: {lay.capture})")
    return lines


def _exposure_lines(baseline_anonymous: bool, certificates: bool, lay: Layout) -> list[str]:
    """What an exposed session demands of its clients (as a board's cell does, lab/board_side.py)."""
    how = "client certificates" if certificates else f"user names and passwords ({lay.pki / 'passwords.txt'})"
    lines = [f"  clients authenticate with {how}; only user 'publisher' may write {TOPIC}, 'subscriber' reads it"]
    if baseline_anonymous:
        lines.append("  (the study's scenario is anonymous: an exposed broker is not, so strangers on the LAN can "
                     "neither publish into the measured topic nor take the publisher's client id)")
    return lines


def _impairment_record() -> Path:
    return Layout(session_dir()).impairment


def _apply_session_impairment(impairment: Impairment) -> str | None:
    """Apply a broker->subscriber profile and leave it applied; `testbed down` clears it."""
    record = _impairment_record()
    if impairment.is_noop:
        record.unlink(missing_ok=True)
        return None
    names = {role: compose.container_name(role) for role in ("broker", "subscriber")}
    targets = targets_for_containers(impairment.direction, names)
    write_json_atomic(record, {"profile": impairment.name, "targets": [t.model_dump(mode="json") for t in targets]})
    state = apply(impairment, targets)
    write_json_atomic(record, {"profile": impairment.name, "targets": [t.model_dump(mode="json") for t in targets],
                               "after": state})
    return f"impairment {impairment.name} applied to broker->subscriber (cleared by `testbed down`)"


def _clear_session_impairment() -> list[str]:
    data = read_json(_impairment_record())
    if not data:
        return []
    targets = [ImpairmentTarget.model_validate(t) for t in data.get("targets", [])]
    try:
        clear(targets)  # containers already gone are skipped: their namespaces went with them
    except TestbedError as exc:
        raise TestbedError(f"could not clear impairment {data.get('profile')}: {exc.message}",
                           evidence=exc.evidence, hint=exc.hint) from exc
    _impairment_record().unlink(missing_ok=True)
    return [f"impairment {data.get('profile')} cleared"]


def status() -> list[tuple[str, str, str, str, str]]:
    """Every testbed container of this user: the session's and those of runs and sweeps (live or left)."""
    return [(c.service or c.labels.get("io.testbed.helper", ""), c.name, c.state.status,
             c.state.health.status if c.state.health else "-", ", ".join(c.ports))
            for found in compose.mine().values() for c in found]


def down() -> list[str]:
    """The session down; what this user's crashed invocations left removed; live invocations named, untouched."""
    docker.engine_version()
    name = compose.use_session()
    lines = _clear_session_impairment()
    removed = compose.down()
    lines += [f"removed leftover {r}" for r in removed]
    reaped, live = compose.reap()
    lines += reaped
    lines.append(f"testbed is down (containers, networks and volumes of project {name} removed)")
    return lines + live
