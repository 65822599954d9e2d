"""What a bundle records of the images its cells ran (issue 38, "records that are not what ran"): each cell's
containers' own images (docker inspect .Image, not a tag's image at manifest time) and the versions read inside each
(dpkg's names for the image's own Debian); the bundle-wide section is their union and contradicts no cell; what is not
read is labelled configured. Docker's answers are faked here (tests/integration/test_image_records.py asks a real
engine)."""

from __future__ import annotations

import fnmatch
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends import docker
from orchestrator.backends.docker import Container
from orchestrator.environment import record as environment
from orchestrator.measure import sweep
from orchestrator.model.layout import BundleLayout, Layout
from orchestrator.model.sweep import SweepPlan
from orchestrator.report.compare import named, provenance
from orchestrator.results import schema
from orchestrator.results.manifest import load_manifest, new_manifest, save_manifest
from orchestrator.results.schema import check_schema

PROJECT = "testbed-me-0123abcd"
# the images: Debian 12 ones, and the 3.6 publisher on Debian 13 (its packages under Debian 13's names)
IDS = {name: "sha256:" + (str(n) * 64)[:64] for n, name in enumerate(
    ("broker", "capture", "subscriber", "publisher", "publisher-mbedtls36", "netadmin", "broker13", "rebuilt"), 1)}
PACKAGES = {
    IDS["broker"]: {"mosquitto": "2.0.11-1.2+deb12u1", "libssl3": "3.0.17-1~deb12u2", "openssl": "3.0.17-1~deb12u2"},
    IDS["broker13"]: {"mosquitto": "2.0.21-1", "libssl3t64": "3.5.1-1", "openssl": "3.5.1-1"},
    IDS["capture"]: {"tshark": "4.0.17-0+deb12u1", "libssl3": "3.0.17-1~deb12u2"},
    IDS["subscriber"]: {"python3": "3.11.2-1+b1", "libssl3": "3.0.17-1~deb12u2"},
    IDS["publisher"]: {"libmbedcrypto7": "2.28.3-1", "libmbedtls14": "2.28.3-1", "libmbedx509-1": "2.28.3-1"},
    IDS["publisher-mbedtls36"]: {"libmbedcrypto16": "3.6.4-2", "libmbedtls21": "3.6.4-2", "libmbedx509-7": "3.6.4-2"},
    IDS["rebuilt"]: {"libmbedcrypto16": "3.6.5-1", "libmbedtls21": "3.6.5-1", "libmbedx509-7": "3.6.5-1"},
    IDS["netadmin"]: {"iproute2": "6.1.0-3"},
}
# what each tag names NOW (at the manifest's making): the 3.6 publisher was rebuilt since its cells' containers started
TAGS = {f"testbed-{n}:latest": IDS[n] for n in ("broker", "capture", "subscriber", "publisher", "netadmin")}
TAGS["testbed-publisher-mbedtls36:latest"] = IDS["rebuilt"]


class FakeDocker:
    """The engine and the tools as the environment asks them; the dpkg-query runs it saw."""

    def __init__(self) -> None:
        self.dpkg: list[str] = []

    def __call__(self, argv: Sequence[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        argv = [str(a) for a in argv]
        if argv[:2] == ["docker", "run"] and "dpkg-query" in argv:
            return self._dpkg(argv)
        if argv[:3] == ["docker", "image", "inspect"]:  # by tag (what the environment asked before issue 38)
            found = [{"Id": TAGS[t], "Config": {"Labels": {}}} for t in argv[3:] if t in TAGS]
            return subprocess.CompletedProcess(argv, 0, json.dumps(found), "")
        answers = {("docker", "version"): "20.10.24+dfsg1", ("docker", "compose"): "2.20.3",
                   ("tshark", "--version"): "TShark (Wireshark) 4.0.17 (Git v4.0.17 packaged as 4.0.17-0+deb12u1)."}
        return subprocess.CompletedProcess(argv, 0, answers[tuple(argv[:2])] + "\n", "")

    def _dpkg(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        at = argv.index("-W")
        image, patterns = argv[at - 1], argv[at + 3:]
        self.dpkg.append(image)
        installed = PACKAGES[TAGS.get(image, image)]
        names = sorted({p for pat in patterns for p in installed if fnmatch.fnmatchcase(p, pat)})
        missing = [pat for pat in patterns if not any(fnmatch.fnmatchcase(p, pat) for p in installed)]
        fmt = argv[at + 2]
        out = "".join(fmt.replace("${db:Status-Abbrev}", "ii ").replace("${Package}", n)
                      .replace("${Version}", installed[n]).replace("\\t", "\t").replace("\\n", "\n") for n in names)
        err = "".join(f"dpkg-query: no packages found matching {m}\n" for m in missing)
        return subprocess.CompletedProcess(argv, 1 if missing else 0, out, err)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    engine = FakeDocker()
    monkeypatch.setattr(environment, "run", engine)
    monkeypatch.setattr(environment, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(docker, "run", engine)
    monkeypatch.setattr(docker, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(docker, "compose_command", lambda: ("docker", "compose"))
    monkeypatch.setattr(environment, "_versions_read", {})  # each test's process starts with nothing read
    return engine


def container(service: str | None, tag: str, image_id: str, labels: dict[str, str] | None = None) -> Container:
    """A container as `docker inspect` shows it: Config.Image the tag it was made from, .Image the image it runs."""
    name = f"{PROJECT}-{service}-1" if service else f"{PROJECT}-router-1-netadmin"
    return Container.from_inspect({"Id": name * 2, "Name": "/" + name, "Image": image_id,
                                   "Config": {"Image": tag, "Labels": {**({docker.SERVICE_LABEL: service}
                                                                          if service else {}), **(labels or {})}},
                                   "State": {"Status": "exited", "ExitCode": 0}})


def cell_containers(publisher: str = "publisher-mbedtls36", impaired: bool = False) -> list[Container]:
    ran = [container(s, f"testbed-{s}:latest", IDS[s]) for s in ("broker", "capture", "subscriber")]
    ran.append(container("publisher", f"testbed-{publisher}:latest", IDS[publisher]))
    if impaired:  # the userspace delay line: the router, and its impairment helper in which the line runs
        ran.append(container("router", "testbed-netadmin:latest", IDS["netadmin"]))
        ran.append(container(None, "testbed-netadmin:latest", IDS["netadmin"],
                             {"io.testbed.helper": f"{PROJECT}-router-1"}))
    return ran


def record_cell(bundle: Path, cell_id: str, images: dict[str, Any], device: str = "mbed TLS 3.6.4") -> None:
    """A finished cell of the bundle's plan as the sweep ends it: its cell.json, then its manifest entry
    (measure/sweep.py)."""
    cell = next(c for c in SweepPlan.model_validate(load_manifest(bundle)["plan"]).cells() if c.cell_id == cell_id)
    run_dir = BundleLayout(bundle).run(cell_id).root
    run_dir.mkdir(parents=True)
    Layout(run_dir).cell.write_text(json.dumps({"schema_version": 2, "cell_id": cell_id, "scenario": "tls",
                                                "payload": 65, "status": "ok", "images": images,
                                                "device": {"tls_library": device}}))

    class Quiet:
        def cell_finished(self, *_a: Any) -> None: ...

    sweep._end_cell(bundle, cell, run_dir, {}, "ok", None, Quiet())


def start(tmp_path: Path, plan: SweepPlan) -> Path:
    """A sweep's bundle as it starts: the manifest with this host's environment."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    save_manifest(bundle, new_manifest(plan, "t", ["testbed", "sweep"], source={},
                                       environment=environment.environment()))
    return bundle


def test_a_36_sweep_records_the_36_publisher_and_nothing_of_228(fake: FakeDocker, tmp_path: Path) -> None:
    bundle = start(tmp_path, SweepPlan(payloads=[65], device_stacks=["mbedtls-3.6"]))
    assert "2.28" not in json.dumps(load_manifest(bundle)["environment"])  # no image ran yet: none is named
    assert IDS["publisher"] not in json.dumps(load_manifest(bundle)["environment"])

    images = environment.ran_images(cell_containers(), PROJECT)
    record_cell(bundle, "tls-65B-none-mbedtls36-r1", images)
    env = load_manifest(bundle)["environment"]

    assert images["publisher"] == {"image": "testbed-publisher-mbedtls36:latest", "id": IDS["publisher-mbedtls36"],
                                   "versions": PACKAGES[IDS["publisher-mbedtls36"]]}
    # the container's image, not what the tag names by now (rebuilt since)
    assert env["image_digests"] == {"broker": IDS["broker"], "capture": IDS["capture"],
                                    "subscriber": IDS["subscriber"], "publisher-mbedtls36": IDS["publisher-mbedtls36"]}
    assert env["versions"]["publisher-mbedtls36"]["libmbedtls21"] == "3.6.4-2"
    assert "2.28" not in json.dumps(env) and env["images_from"] == schema.IMAGES_FROM_CELLS
    assert load_manifest(bundle)["cells"]["tls-65B-none-mbedtls36-r1"]["images"] == images


def test_a_sweep_of_both_stacks_lists_both_publishers(fake: FakeDocker, tmp_path: Path) -> None:
    bundle = start(tmp_path, SweepPlan(payloads=[65], device_stacks=["mbedtls-3.6", "mbedtls-2.28"]))
    record_cell(bundle, "tls-65B-none-mbedtls36-r1", environment.ran_images(cell_containers(), PROJECT))
    record_cell(bundle, "tls-65B-none-r1", environment.ran_images(cell_containers("publisher"), PROJECT),
                device="mbed TLS 2.28.3")
    env = load_manifest(bundle)["environment"]
    assert env["image_digests"]["publisher"] == IDS["publisher"]
    assert env["image_digests"]["publisher-mbedtls36"] == IDS["publisher-mbedtls36"]
    assert env["versions"]["publisher"]["libmbedtls14"] == "2.28.3-1"
    assert env["versions"]["publisher-mbedtls36"]["libmbedtls21"] == "3.6.4-2"
    # each image read once in the sweep, side by side (broker, capture, subscriber: read for the first cell only)
    assert sorted(fake.dpkg) == sorted(IDS[n] for n in ("broker", "capture", "subscriber", "publisher",
                                                         "publisher-mbedtls36"))


def test_an_image_rebuilt_between_cells_is_listed_with_both_ids(fake: FakeDocker, tmp_path: Path) -> None:
    bundle = start(tmp_path, SweepPlan(payloads=[65], device_stacks=["mbedtls-3.6"]))
    record_cell(bundle, "plain-65B-none-mbedtls36-r1", environment.ran_images(cell_containers(), PROJECT))
    rebuilt = [c if c.service != "publisher" else container("publisher", "testbed-publisher-mbedtls36:latest",
                                                            IDS["rebuilt"]) for c in cell_containers()]
    record_cell(bundle, "tls-65B-none-mbedtls36-r1", environment.ran_images(rebuilt, PROJECT))
    env = load_manifest(bundle)["environment"]
    assert env["image_digests"]["publisher-mbedtls36"] == sorted([IDS["publisher-mbedtls36"], IDS["rebuilt"]])
    assert env["versions"]["publisher-mbedtls36@555555555555"]["libmbedtls21"] == "3.6.4-2"
    assert env["versions"]["publisher-mbedtls36@888888888888"]["libmbedtls21"] == "3.6.5-1"


def test_a_debian_13_image_is_read_under_its_own_package_names(fake: FakeDocker) -> None:
    """Debian 13 renamed OpenSSL's library libssl3t64 (the 64-bit time_t transition) and ships mbedTLS 3.6 as
    libmbedtls21: the packages are found by pattern, under whatever name the image's Debian gives them."""
    broker13 = container("broker", "testbed-broker:latest", IDS["broker13"])
    publisher36 = container("publisher", "testbed-publisher-mbedtls36:latest", IDS["publisher-mbedtls36"])
    images = environment.ran_images([broker13, publisher36], PROJECT)
    assert images["broker"]["versions"] == {"libssl3t64": "3.5.1-1", "mosquitto": "2.0.21-1"}
    assert images["publisher"]["versions"] == PACKAGES[IDS["publisher-mbedtls36"]]


def test_the_delay_line_image_gets_a_digest(fake: FakeDocker, tmp_path: Path) -> None:
    bundle = start(tmp_path, SweepPlan(payloads=[65], impairments=["wifi-good"]))
    images = environment.ran_images(cell_containers("publisher", impaired=True), PROJECT)
    assert images["router"]["id"] == images["helper of router"]["id"] == IDS["netadmin"]
    assert images["helper of router"]["versions"] == {"iproute2": "6.1.0-3"}
    record_cell(bundle, "tls-65B-wifi-good-r1", images, device="mbed TLS 2.28.3")
    assert load_manifest(bundle)["environment"]["image_digests"]["netadmin"] == IDS["netadmin"]
    assert fake.dpkg.count(IDS["netadmin"]) == 1  # the router and its helper: one image, read once


def test_the_delay_lines_helper_is_among_the_cells_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cell takes its impairment helpers' images with its compose containers': the delay line runs in the
    router's helper (measure/local.py)."""
    from orchestrator.backends.impairment.models import Hook, ImpairmentTarget
    from orchestrator.measure.impairment import LineWatch
    from orchestrator.model.impairment import load_impairment

    helper = container(None, "testbed-netadmin:latest", IDS["netadmin"], {"io.testbed.helper": f"{PROJECT}-router-1"})
    asked: list[list[str]] = []
    router = f"{PROJECT}-router-1"
    targets = [ImpairmentTarget(label=label, container=router, interface=nic, hook=Hook.FORWARD, line=True)
               for label, nic in (("publisher", "eth1"), ("broker", "eth0"))]
    monkeypatch.setattr(docker, "inspect_containers", lambda names: asked.append(list(names)) or [helper])
    assert LineWatch(load_impairment("wifi-good"), targets).helpers() == [helper]
    assert asked == [[f"{router}-netadmin"]]  # one helper per impaired container

    monkeypatch.undo()
    monkeypatch.setattr(docker, "run", lambda *_a, **_k: pytest.fail("no engine call for an unimpaired cell"))
    assert LineWatch(load_impairment("none"), []).helpers() == []


def test_tcp_nodelay_is_labelled_configured_not_observed(fake: FakeDocker) -> None:
    env = environment.environment()
    assert "tcp_nodelay" not in env  # nothing beside what was read says what no program reported
    assert "not read from their sockets" in env["configured"]["tcp_nodelay"]
    assert env["tshark"].startswith("TShark") and env["docker"] == "20.10.24+dfsg1"


def test_dpkg_lines_of_packages_not_installed_are_left_out() -> None:
    text = "ii \tlibssl3\t3.0.17-1~deb12u2\nrc \tlibssl1.1\t1.1.1w-0+deb11u1\nun \tlibmbedtls12\t\n"
    assert environment.parse_dpkg(text) == {"libssl3": "3.0.17-1~deb12u2"}


def test_an_image_that_cannot_be_read_is_recorded_as_unread_and_read_again(fake: FakeDocker,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def refused(argv: Sequence[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(str(argv[7]))
        return subprocess.CompletedProcess(list(argv), 125, "", "docker: Error response from daemon")

    monkeypatch.setattr(environment, "run", refused)
    ran = [container("broker", "testbed-broker:latest", IDS["broker"])]
    assert environment.ran_images(ran, PROJECT)["broker"]["versions"] is None
    assert environment.ran_images(ran, PROJECT)["broker"]["versions"] is None
    assert calls == [IDS["broker"], IDS["broker"]]


# ---------------------------------------------------------------- bundles from before (manifest version 1)
def v1_manifest(plan: dict[str, Any]) -> dict[str, Any]:
    """A version-1 manifest as the tool wrote it: the images' tags read when the sweep started."""
    return {"schema_version": 1, "plan": plan, "cells": {}, "environment": {
        "host": {"kernel": "6.1.0"}, "docker": "20.10.24", "compose": "2.20.3", "tshark": "TShark 4.0.17",
        "mosquitto": "mosquitto 2.0.11-1.2+deb12u1", "mbedtls": "libmbedcrypto7 2.28.3-1",
        "openssl_broker": "libssl3 3.0.17-1~deb12u2",
        "image_digests": {s: IDS[s] for s in ("broker", "capture", "subscriber", "publisher")},
        "tcp_nodelay": "publisher (vdevice) and subscriber set TCP_NODELAY"}}


def test_an_old_36_bundle_no_longer_names_the_228_publisher(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(v1_manifest({"device_stacks": ["mbedtls-3.6"]})))
    env = load_manifest(tmp_path)["environment"]
    assert "2.28" not in json.dumps(env) and "publisher" not in env["image_digests"]
    assert env["versions"] == {"broker": {"mosquitto": "2.0.11-1.2+deb12u1", "libssl3": "3.0.17-1~deb12u2"}}
    assert env["images_from"] == schema.IMAGES_FROM_TAGS and env["configured"]["tcp_nodelay"].startswith("publisher")
    assert "tcp_nodelay" not in env and "mbedtls" not in env


def test_an_old_228_bundle_keeps_its_values_labelled(tmp_path: Path) -> None:
    env = check_schema(v1_manifest({"device_stacks": ["mbedtls-2.28"]}), tmp_path / "m.json", "manifest")[
        "environment"]
    assert env["image_digests"]["publisher"] == IDS["publisher"]
    assert env["versions"]["publisher"] == {"libmbedcrypto7": "2.28.3-1"}
    board = check_schema(v1_manifest({"publisher": "esp32"}), tmp_path / "m.json", "manifest")["environment"]
    assert "publisher" not in board["image_digests"]  # a board's sweep ran no publisher container


def test_a_lab_manifest_of_version_1_reads_unchanged(tmp_path: Path) -> None:
    lab = {"host": {"kernel": "6.1.0"}, "tshark": "TShark 4.0.17", "ansible": "ansible 2.14",
           "where": "the controlling host; each lab host is described in its cells' hosts"}
    m = check_schema({"schema_version": 1, "environment": lab}, tmp_path / "m.json", "manifest")
    assert m == {"schema_version": 2, "environment": lab}


def test_compare_names_old_and_new_bundles_alike(fake: FakeDocker, tmp_path: Path) -> None:
    """An old bundle and a new one of the same images differ in where their images were read, not in the images."""
    old = check_schema(v1_manifest({"device_stacks": ["mbedtls-2.28"]}), tmp_path / "m.json", "manifest")
    bundle = start(tmp_path, SweepPlan(payloads=[65]))
    record_cell(bundle, "tls-65B-none-r1", environment.ran_images(cell_containers("publisher"), PROJECT),
                device="mbed TLS 2.28.3")
    new = load_manifest(bundle)
    a, b = provenance(old), provenance(new)
    assert a["environment.image_digests.broker"] == b["environment.image_digests.broker"] == IDS["broker"]
    assert a["environment.image_digests.publisher"] == b["environment.image_digests.publisher"]
    assert a["environment.versions.broker.mosquitto"] == b["environment.versions.broker.mosquitto"]
    differing = [k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    assert "environment.images_from" in differing
    assert named(["environment.images_from", "environment.versions.capture.tshark"]) == \
        "images, versions in the images (capture.tshark)"
