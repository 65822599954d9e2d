"""The device_stack axis (issue 25): mbedtls-2.28 or mbedtls-3.6 for the virtual device and the fleet.

It picks the publisher image (publishers/virtual.py), keys the cell id (``-mbedtls36``; the default adds nothing,
so the study's cell ids stay), lets the 3.6 device take a TLS 1.3 scenario (rule device-speaks-tls12), and the 3.6
device offers both ChaCha20 lists for TLS 1.3 as the firmware's env esp32dev-idf5-tls13 does."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends import images
from orchestrator.errors import TestbedError
from orchestrator.model import rules
from orchestrator.model.axes import AXES
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers import virtual
from orchestrator.publishers.virtual import device_ciphers, publisher_args

TLS13 = "TLS_CHACHA20_POLY1305_SHA256"
TLS12 = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"


def test_the_axis_is_listable_and_keys_the_cell_id_only_when_not_the_default() -> None:
    axis = AXES["device_stack"]
    assert axis.choices == ("mbedtls-2.28", "mbedtls-3.6") and axis.default == "mbedtls-2.28"
    assert axis.sweep is not None and axis.sweep.name == "device_stacks"
    plan = SweepPlan(scenarios=["tls13-chacha20", "tls"], payloads=[65], device_stacks=["mbedtls-2.28", "mbedtls-3.6"])
    ids = sorted(c.cell_id for c in plan.cells())
    assert ids == ["tls-65B-none-mbedtls36-r1", "tls-65B-none-r1", "tls13-chacha20-65B-none-mbedtls36-r1",
                   "tls13-chacha20-65B-none-r1"]


def test_a_board_or_a_lab_host_has_no_stack_to_pick() -> None:
    with pytest.raises(ValueError, match=r"rule device-stack-is-virtual"):
        RunSpec(scenario="tls", publisher="esp32", serial_port="/dev/ttyUSB0", device_stack="mbedtls-3.6")
    with pytest.raises(ValueError, match=r"rule device-stack-is-virtual"):
        RunSpec(scenario="tls", inventory="/x/lab.yml", device_stack="mbedtls-3.6")
    assert RunSpec(scenario="tls", devices=20, device_stack="mbedtls-3.6").device_stack == "mbedtls-3.6"


def test_tls13_needs_the_36_stack() -> None:
    scenario = load_scenario("tls13-chacha20")
    with pytest.raises(rules.RuleViolation, match=r"mbedTLS 2\.28 speaks TLS 1\.2 only"):
        rules.check_scenario(scenario, RunSpec(scenario="tls13-chacha20").values())
    rules.check_scenario(scenario, RunSpec(scenario="tls13-chacha20", device_stack="mbedtls-3.6").values())


def _ciphers(argv: list[str]) -> str:
    return argv[argv.index("--ciphers") + 1]


def test_the_36_device_offers_both_chacha_lists_for_tls13(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "cell")
    tls13, tls = load_scenario("tls13-chacha20"), load_scenario("tls")
    assert device_ciphers(tls13, "mbedtls-3.6") == [TLS13, TLS12]
    assert device_ciphers(tls, "mbedtls-3.6") == [TLS12]  # the 1.2 suite alone keeps it at TLS 1.2
    spec = RunSpec(scenario="tls13-chacha20", device_stack="mbedtls-3.6")
    assert _ciphers(publisher_args(tls13, lay, None, spec)) == f"{TLS13},{TLS12}"
    # the 2.28 command line is what it was
    assert publisher_args(tls, lay, None, RunSpec(scenario="tls")) == publisher_args(
        tls, lay, None, RunSpec(scenario="tls", device_stack="mbedtls-3.6"))


def test_the_stack_picks_the_image_and_a_missing_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    built: set[str] = {"testbed-publisher:latest"}
    monkeypatch.setattr(virtual, "image_exists", lambda tag: tag in built)
    assert virtual.publisher_image("mbedtls-2.28") == "testbed-publisher:latest"
    with pytest.raises(TestbedError, match=r"needs the image testbed-publisher-mbedtls36:latest") as exc:
        virtual.publisher_image("mbedtls-3.6")
    assert exc.value.hint == "testbed images build publisher-mbedtls36"
    built.add("testbed-publisher-mbedtls36:latest")
    assert virtual.publisher_image("mbedtls-3.6") == "testbed-publisher-mbedtls36:latest"


def test_the_36_image_is_built_on_a_debian_13_base(monkeypatch: pytest.MonkeyPatch) -> None:
    s = images.spec("publisher-mbedtls36")
    assert s.suite == "trixie" and s.dockerfile == "images/publisher-mbedtls36/Dockerfile"
    assert all(images.spec(n).suite == "bookworm" for n in ("broker", "capture", "subscriber", "publisher"))
    bases: list[str] = []
    monkeypatch.setattr(images, "resolve_base_image", lambda progress, mirror, suite: bases.append(suite) or
                        f"testbed-base:{suite}")
    monkeypatch.setattr(images, "image_label", lambda tag, label: None)
    built: list[list[str]] = []
    monkeypatch.setattr(images, "run", lambda argv, **kw: built.append(argv) or type("P", (), {"returncode": 1})())
    images.build_images(["publisher-mbedtls36"])
    assert bases == ["trixie"]
    assert "BASE_IMAGE=testbed-base:trixie" in built[-1]
