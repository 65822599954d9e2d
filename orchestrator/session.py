"""`testbed up / status / down`: a long-lived topology in .testbed/session/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchestrator.backends import compose, docker_engine
from orchestrator.backends.images import missing_images
from orchestrator.errors import TestbedError
from orchestrator.lab import prepare_run_dir, topology, wait_subscribed
from orchestrator.model.scenario import load_scenario
from orchestrator.paths import state_dir


def session_dir() -> Path:
    return state_dir() / "session"


def up(scenario_name: str, *, expose: bool = False, host_port: int | None = None,
       progress: Callable[[str], None] = lambda _m: None) -> list[str]:
    scenario = load_scenario(scenario_name)  # bad input fails before anything touches docker
    docker_engine.engine_version()
    docker_engine.compose_command()
    missing = missing_images(compose.CORE_SERVICES)
    if missing:
        raise TestbedError(f"images not built: {', '.join(missing)}", hint="testbed images build")
    if any(c.get("State") == "running" for c in compose.ps()):
        raise TestbedError("a testbed is already running", hint="`testbed status` shows it; `testbed down` stops it")
    lay, pki = prepare_run_dir(session_dir(), scenario)
    topo = topology(scenario, lay, host_port=host_port, expose=expose)
    compose.check_port_free(topo.bind, topo.host_port)
    progress(f"starting broker, capture and subscriber for scenario {scenario.name}")
    try:
        compose.up(topo)
        st = wait_subscribed(lay)
    except BaseException:
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
    lines.append(f"files: {lay.root}  (capture: {lay.capture})")
    return lines


def status() -> list[tuple[str, str, str, str, str]]:
    rows = []
    for c in compose.ps():
        publishers = c.get("Publishers")
        ports = publishers if isinstance(publishers, list) else []
        pub = ", ".join(f"{p.get('URL')}:{p.get('PublishedPort')}->{p.get('TargetPort')}"
                        for p in ports if isinstance(p, dict) and p.get("PublishedPort"))
        rows.append((str(c.get("Service", "")), str(c.get("Name", "")), str(c.get("State", "")),
                     str(c.get("Health", "") or "-"), pub))
    return rows


def down() -> list[str]:
    docker_engine.engine_version()
    removed = compose.down()
    lines = [f"removed leftover {r}" for r in removed]
    lines.append("testbed is down (containers, networks and volumes of project 'testbed' removed)")
    return lines
