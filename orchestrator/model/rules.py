"""Which combinations of axis values a run may have: every rule in one place, each with a name.

A run's values (one RunSpec, or one combination of a sweep's lists) are checked before anything starts;
a refusal is a RuleViolation whose message ends with ``(rule NAME)``. The rules that say which publishers
and sites an axis's non-default value needs are written on the axis (``Axis.only`` in
orchestrator/model/axes.py) and checked here; the others are below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.model.axes import AXES, MAX_DEVICES_PER_HOST, MAX_SEED, AxisTable
from orchestrator.model.brokers import broker_of
from orchestrator.model.impairment import Direction, Impairment
from orchestrator.model.scenario import Scenario

TIMESTAMP_DIGITS = 16
DEVICE_ID = "v1"
FLEET_PREFIX = "f"  # a fleet's devices are f0000, f0001, ... (the fleet binary's ids: prefix + index_digits)
MIN_INDEX_DIGITS = 4  # f0000..f9999 up to 10,000 devices; wider only when the fleet's last index needs it


class RuleViolation(ValueError):
    def __init__(self, rule: str, text: str) -> None:
        super().__init__(f"{text} (rule {rule})")
        self.rule = rule


@dataclass(frozen=True)
class Rule:
    name: str
    check: Callable[[Mapping[str, Any]], str | None]  # the refusal, or None


def publisher_kind(values: Mapping[str, Any]) -> str:
    """virtual (one virtual device), fleet (N > 1 of them) or esp32 (a board)."""
    if values.get("publisher") == "esp32":
        return "esp32"
    return "virtual" if AXES.is_default(values, "devices") else "fleet"


def site(values: Mapping[str, Any]) -> str:
    return "inventory" if values.get("inventory") else "local"


def payload_min_size(samples: int, device_id: str = DEVICE_ID) -> int:
    """Smallest payload that fits every message of a run (mirrors the firmware core's rule:
    worst-case widths: digits of samples-1, a 16-digit timestamp, 4-digit readings)."""
    seq_digits = len(str(max(samples - 1, 0)))
    worst = ('{"d":"' + device_id + '","n":' + "9" * seq_digits + ',"t":' + "9" * TIMESTAMP_DIGITS
             + ',"s":[1,4095,4095,9999]}')
    return len(worst)


def index_digits(devices: int) -> int:
    """Digits of a fleet's device indices (the fleet binary's index_digits): 4, or as many as its last index has
    (5 for 10,001..100,000 devices, 6 up to 1,000,000)."""
    return max(MIN_INDEX_DIGITS, len(str(max(devices - 1, 0))))


def fleet_device_id(index: int, devices: int) -> str:
    """Device ``index``'s id (its MQTT client id and the payload's ``d``) in a fleet of ``devices``."""
    return f"{FLEET_PREFIX}{index:0{index_digits(devices)}d}"


def id_for_payload(values: Mapping[str, Any]) -> str:
    """The longest device id the payload must hold."""
    devices = AXES.value(values, "devices")
    return fleet_device_id(devices - 1, devices) if devices > 1 else str(values.get("device_id", DEVICE_ID))


def _payload_fits(v: Mapping[str, Any]) -> str | None:
    device_id = id_for_payload(v)
    minimum = payload_min_size(v["samples"], device_id)
    if v["payload"] >= minimum:
        return None
    return (f"payload {v['payload']} B is below the minimum of {minimum} B for {v['samples']} samples "
            f"(device id {device_id!r}): the sample JSON needs {minimum} B")


def _fleet_fits_one_host(v: Mapping[str, Any]) -> str | None:
    devices = AXES.value(v, "devices")
    if site(v) == "local" and devices > MAX_DEVICES_PER_HOST:
        return (f"--devices {devices}: one host runs at most {MAX_DEVICES_PER_HOST} devices of a fleet (the fleet "
                "program's per-host limit); a bigger fleet runs across the publisher hosts of a lab inventory "
                "(--inventory, docs/multi-host.md), each its share")
    return None


def _esp32_needs_port(v: Mapping[str, Any]) -> str | None:
    if v.get("publisher") == "esp32" and not v.get("serial_port"):
        return "--publisher esp32 needs --serial-port (e.g. /dev/ttyUSB0, or the PTY of `testbed board emulate`)"
    return None


def _link_down_needs_a_container(v: Mapping[str, Any]) -> str | None:
    if v.get("publisher") == "esp32" and "link-down" in str(v.get("events") or ""):
        return ("--events link-down drops the publisher container's link: a board has none (its radio is its own); "
                "the broker's events (broker-restart, broker-kill) run with a board")
    return None


def _topic_alias_needs_mqtt5(v: Mapping[str, Any]) -> str | None:
    if v.get("topic_alias") == "on" and v.get("mqtt") != "5":
        return "--topic-alias on needs --mqtt 5 (topic aliases are MQTT 5's)"
    return None


def _backoff_base_within_cap(v: Mapping[str, Any]) -> str | None:
    base, cap = v.get("reconnect_base_ms"), v.get("reconnect_cap_ms")
    if v.get("reconnect") == "backoff" and base is not None and cap is not None and base > cap:
        return (f"--reconnect-base {base:g} ms is above --reconnect-cap {cap:g} ms: the backoff's first wait "
                "would already exceed its cap")
    return None


def _websocket_needs_a_broker_that_speaks_it(v: Mapping[str, Any]) -> str | None:
    if AXES.value(v, "transport") != "websocket":
        return None
    if site(v) == "inventory":
        return ("--transport websocket: a lab's broker host runs its own Mosquitto (lab/remote.py), whose build may "
                "have no websockets; websocket cells run on this host's mosquitto-2.0.21 image")
    broker = broker_of(v)
    if not broker.websockets:
        why = ("its Web MQTT plugin is not configured here yet" if broker.implementation == "rabbitmq"
               else "is built without websockets")
        return f"--transport websocket: broker {broker.name} ({broker.version}) {why}; mosquitto-2.0.21 speaks it"
    return None


def _broker_images_run_here(v: Mapping[str, Any]) -> str | None:
    broker = AXES.value(v, "broker")
    if site(v) == "inventory" and broker not in ("auto", "mosquitto"):
        return (f"--broker {broker}: a lab's broker host runs its own Mosquitto (lab/remote.py); the other broker "
                "builds run in this host's images")
    return None


def _rabbitmq_has_no_qos2(v: Mapping[str, Any]) -> str | None:
    broker = broker_of(v)
    if not broker.qos2 and AXES.value(v, "qos") == 2:
        return (f"--qos 2 on broker {broker.name}: RabbitMQ's MQTT plugin ({broker.version}) has QoS 0 and 1 only "
                "(it would downgrade QoS 2)")
    return None


def _rabbitmq_resumes_by_session_id(v: Mapping[str, Any]) -> str | None:
    broker = broker_of(v)
    if not broker.tls12_tickets and AXES.value(v, "connection") == "resume-ticket":
        return (f"--connection resume-ticket on broker {broker.name}: its TLS ({broker.tls_library}) issues no TLS 1.2 "
                "session ticket, it resumes TLS 1.2 by session ID only (use resume-id)")
    return None


def _rabbitmq_takes_the_virtual_devices(v: Mapping[str, Any]) -> str | None:
    broker = broker_of(v)
    if broker.implementation == "rabbitmq" and publisher_kind(v) == "esp32":
        return (f"--publisher esp32 on broker {broker.name}: a board's broker is exposed with an ACL on the measured "
                "topic, written for Mosquitto only (RabbitMQ's topic permissions are not generated yet)")
    return None


def _sleep_is_between_connections(v: Mapping[str, Any]) -> str | None:
    mode = AXES.value(v, "sleep_mode")
    if not AXES.is_default(v, "sleep_mode") and AXES.is_default(v, "connection"):
        return (f"--sleep-mode {mode} sleeps between connections, and a persistent connection has none (a deep sleep "
                "would lose it): use --connection reconnect, resume-id or resume-ticket")
    return None


def _repeat_seeds_fit(v: Mapping[str, Any]) -> str | None:
    if v["seed"] + v["repeat"] - 1 > MAX_SEED:
        return f"--seed {v['seed']} with --repeat {v['repeat']}: repeat r runs with seed + r - 1, above {MAX_SEED}"
    return None


RULES: tuple[Rule, ...] = (
    Rule("payload-fits", _payload_fits),
    Rule("fleet-fits-one-host", _fleet_fits_one_host),
    Rule("esp32-needs-serial-port", _esp32_needs_port),
    Rule("topic-alias-needs-mqtt5", _topic_alias_needs_mqtt5),
    Rule("link-down-needs-a-container", _link_down_needs_a_container),
    Rule("backoff-base-within-cap", _backoff_base_within_cap),
    Rule("websocket-needs-a-broker-that-speaks-it", _websocket_needs_a_broker_that_speaks_it),
    Rule("sleep-is-between-connections", _sleep_is_between_connections),
    Rule("broker-images-run-on-this-host", _broker_images_run_here),
    Rule("rabbitmq-has-no-qos2", _rabbitmq_has_no_qos2),
    Rule("rabbitmq-resumes-tls12-by-session-id", _rabbitmq_resumes_by_session_id),
    Rule("rabbitmq-board-acl-not-written", _rabbitmq_takes_the_virtual_devices),
)
SWEEP_RULES: tuple[Rule, ...] = (  # on a sweep's own values, once per plan
    Rule("repeat-seeds-fit", _repeat_seeds_fit),
)


@dataclass(frozen=True)
class ScenarioRule:
    name: str
    check: Callable[[Scenario, Mapping[str, Any]], str | None]


def _device_speaks_tls12(scenario: Scenario, v: Mapping[str, Any]) -> str | None:
    if scenario.tls is not None and scenario.tls.client_version == "1.3" and (
            v.get("publisher") == "esp32" or AXES.value(v, "device_stack") != "mbedtls-3.6"):
        return (f"scenario {scenario.name} needs TLS 1.3, but the {AXES.value(v, 'publisher')} ESP32's "
                "mbedTLS 2.28 speaks TLS 1.2 only (the virtual one on --device-stack mbedtls-3.6 speaks TLS 1.3)")
    return None


def _rabbitmq_tls_it_can_express(scenario: Scenario, v: Mapping[str, Any]) -> str | None:
    broker = broker_of(v)
    if broker.implementation != "rabbitmq" or scenario.tls is None:
        return None
    if scenario.tls.client_auth == "certificate":
        return (f"scenario {scenario.name} authenticates clients by certificate: the rabbitmq broker's configuration "
                "(lab/rabbitmqconf.py) is written for passwords only (mqtt.ssl_cert_login is not wired yet)")
    if scenario.tls.client_version == "1.3" and AXES.value(v, "connection").startswith("resume-"):
        return (f"scenario {scenario.name} resumes over TLS 1.3, which is by ticket (PSK) only: the rabbitmq broker "
                "issues none (Erlang ssl's server session_tickets stay disabled); it resumes TLS 1.2 by session ID")
    return None


SCENARIO_RULES: tuple[ScenarioRule, ...] = (  # once the scenario is read (the run's preflight)
    ScenarioRule("device-speaks-tls12", _device_speaks_tls12),
    ScenarioRule("rabbitmq-tls-it-can-express", _rabbitmq_tls_it_can_express),
)


def check_scenario(scenario: Scenario, values: Mapping[str, Any]) -> None:
    """Refuse the first rule a run's scenario and values break (RuleViolation)."""
    for rule in SCENARIO_RULES:
        text = rule.check(scenario, values)
        if text is not None:
            raise RuleViolation(rule.name, text)


@dataclass(frozen=True)
class ProfileRule:
    name: str
    check: Callable[[Impairment, Mapping[str, Any]], str | None]


def _board_rate(imp: Impairment, v: Mapping[str, Any]) -> str | None:
    if publisher_kind(v) == "esp32" and imp.rate_kbit is not None and imp.direction.covers(
            Direction.PUBLISHER_TO_BROKER):
        return (f"--impairment {imp.name} limits the rate, which acts at a sender's egress; a board's egress is its "
                "own radio")
    return None


def _board_netem(imp: Impairment, v: Mapping[str, Any]) -> str | None:
    if publisher_kind(v) == "esp32" and v.get("delay_mechanism") == "netem" and imp.needs_netem:
        return ("--delay-mechanism netem with --publisher esp32: netem delays a sender's egress, and a board's is its "
                "radio; the board's path is delayed by the delay line at the broker's ingress")
    return None


def _lab_direction(imp: Impairment, v: Mapping[str, Any]) -> str | None:
    if site(v) == "inventory" and imp.direction.covers(Direction.BROKER_TO_SUBSCRIBER):
        return (f"impairment {imp.name} acts on broker->subscriber: in a lab the routers impair publisher->broker only "
                "(the subscriber sits beside the broker)")
    return None


PROFILE_RULES: tuple[ProfileRule, ...] = (  # once the impairment profile is read (the run's preflight)
    ProfileRule("board-rate-is-its-radio", _board_rate),
    ProfileRule("board-delays-at-the-broker", _board_netem),
    ProfileRule("lab-impairs-publisher-to-broker", _lab_direction),
)


def check_profile(impairment: Impairment, values: Mapping[str, Any]) -> None:
    """Refuse the first rule a run's impairment profile and values break (RuleViolation); a profile that does
    nothing breaks none."""
    if impairment.is_noop:
        return
    for rule in PROFILE_RULES:
        text = rule.check(impairment, values)
        if text is not None:
            raise RuleViolation(rule.name, text)


def _first(rules: tuple[Rule, ...], values: Mapping[str, Any]) -> None:
    for rule in rules:
        text = rule.check(values)
        if text is not None:
            raise RuleViolation(rule.name, text)


def check_sweep(values: Mapping[str, Any]) -> None:
    _first(SWEEP_RULES, values)


def check_rules(table: AxisTable, values: Mapping[str, Any]) -> None:
    """Refuse the first rule one run's values break (RuleViolation)."""
    _first(RULES, values)
    given = [(a, a.only) for a in table
             if a.only is not None and a.name in values and a.only.restricts(values[a.name], a.default)]
    kind, where = publisher_kind(values), site(values)
    for refused in ([(a, o) for a, o in given if kind not in o.publishers],  # the publisher's first, then the site's
                    [(a, o) for a, o in given if where not in o.sites]):
        for axis, only in refused:
            raise RuleViolation(only.rule, only.text.format(value=values[axis.name]))


def rule_names(table: AxisTable) -> set[str]:
    """Every rule a refusal may name."""
    return ({r.name for r in RULES + SWEEP_RULES} | {r.name for r in SCENARIO_RULES} | {r.name for r in PROFILE_RULES}
            | {a.only.rule for a in table if a.only is not None})


def cell_violations(table: AxisTable, scenario: Scenario, impairment: Impairment,
                    values: Mapping[str, Any]) -> list[RuleViolation]:
    """Every rule one cell breaks, with its scenario and profile read (a sweep's plan names them all at once,
    orchestrator/model/plancheck.py): the first of the axes' rules, then each scenario and profile rule."""
    found: list[RuleViolation] = []
    try:
        check_rules(table, values)
    except RuleViolation as exc:
        found.append(exc)
    found += [RuleViolation(r.name, text) for r in SCENARIO_RULES if (text := r.check(scenario, values)) is not None]
    if not impairment.is_noop:
        found += [RuleViolation(r.name, text) for r in PROFILE_RULES
                  if (text := r.check(impairment, values)) is not None]
    return found
