"""A real mbedTLS 3.6 cell records what ran (issue 38): its publisher container's image is the one `docker image
inspect` names, and the mbedTLS version recorded is read inside that image; the manifest's bundle-wide images are
the cell's, with nothing of the 2.28 publisher the sweep never ran (tests/unit/test_image_records.py: the same with
docker's answers faked)."""

from __future__ import annotations

import json
import subprocess

from .conftest import only_bundle, run_testbed

CELL = "tls-65B-none-mbedtls36-r1"


def test_a_36_cell_records_its_publisher_image_and_the_mbedtls_inside_it(tmp_path) -> None:
    run_testbed("down")
    out = tmp_path / "sweep"
    proc = run_testbed("sweep", "--scenarios", "tls", "--baseline", "tls", "--payloads", "65", "--device-stacks",
                       "mbedtls-3.6", "--samples", "10", "--interval", "20ms", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bundle = only_bundle(out)
    cell = json.loads((bundle / "runs" / CELL / "cell.json").read_text())
    publisher = cell["images"]["publisher"]
    inspected = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", publisher["image"]],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert publisher["image"] == "testbed-publisher-mbedtls36:latest"
    assert publisher["id"] == inspected and inspected.startswith("sha256:")
    assert publisher["versions"]["libmbedtls21"].startswith("3.6."), publisher["versions"]
    print(f"reading the cell's images: {cell['timings']['images_s']} s")  # the sweep's first cell reads them all
    assert cell["device"]["tls_library"].startswith("Mbed TLS 3.6."), cell["device"]  # the device says so too

    manifest = json.loads((bundle / "manifest.json").read_text())
    env = manifest["environment"]
    assert manifest["cells"][CELL]["images"] == cell["images"]
    assert env["image_digests"]["publisher-mbedtls36"] == inspected and "publisher" not in env["image_digests"]
    assert env["versions"]["publisher-mbedtls36"] == publisher["versions"]
    mbedtls = {v for versions in env["versions"].values() for k, v in (versions or {}).items()
               if k.startswith("libmbed")}
    assert mbedtls and all(v.startswith("3.6.") for v in mbedtls), mbedtls
    assert "tcp_nodelay" not in env and "tcp_nodelay" in env["configured"]
