import json
import shutil

import pytest

from orchestrator.errors import TestbedError
from orchestrator.model.sweep import SweepPlan
from orchestrator.model.yamlfile import user_input
from orchestrator.results import archive
from orchestrator.results import manifest as bundles
from orchestrator.results.schema import SCHEMA_VERSION


def test_disk_full_is_refused_before_the_first_cell(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(TestbedError) as exc:
        bundles.check_writable(tmp_path, min_free=free * 10)
    assert "MB free on the disk" in exc.value.message


def test_unwritable_out_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(TestbedError) as exc:
        bundles.check_writable(f / "sub")
    assert "cannot write results to" in exc.value.message


def test_newer_schema_refused_current_accepted(tmp_path):
    current = SCHEMA_VERSION["manifest"]
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": current + 1}))
    with pytest.raises(TestbedError) as exc:
        bundles.load_manifest(tmp_path)
    assert "newer than this testbed understands" in exc.value.message
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": current}))
    assert bundles.load_manifest(tmp_path)["schema_version"] == current


def test_missing_manifest_is_not_a_bundle(tmp_path):
    with pytest.raises(TestbedError) as exc:
        bundles.load_manifest(tmp_path)
    assert exc.value.message == f"{tmp_path / 'manifest.json'}: missing; {tmp_path} is not a results bundle"


def test_plan_cells_and_seeded_random_order_with_repeats():
    plan = SweepPlan(payloads=[65, 100], repeat=1, order="as-listed")
    assert [c.cell_id for c in plan.cells()] == ["plain-65B-none-r1", "tls-65B-none-r1", "plain-100B-none-r1",
                                                 "tls-100B-none-r1"]
    rep = SweepPlan(payloads=[65, 100], repeat=3, seed=7)
    ids = [c.cell_id for c in rep.cells()]
    assert len(ids) == 12 and len(set(ids)) == 12
    assert ids == [c.cell_id for c in SweepPlan(payloads=[65, 100], repeat=3, seed=7).cells()]
    assert ids != [c.cell_id for c in SweepPlan(payloads=[65, 100], repeat=3, seed=8).cells()]


@pytest.mark.parametrize("fields,needle", [
    ({"payloads": [40]}, "below the minimum of 62 B"),
    ({"samples": 0}, "samples"),
    ({"payloads": [65, 65]}, "listed twice"),
    ({"payloads": [5000]}, "above the maximum"),
])
def test_impossible_plans(fields, needle):
    with pytest.raises(TestbedError) as exc, user_input("sweep plan"):
        SweepPlan(**fields)
    assert exc.value.message.startswith("invalid sweep plan: ") and needle in exc.value.message


def test_resume_picks_exactly_the_unfinished_cells(tmp_path):
    plan = SweepPlan(payloads=[65])
    (tmp_path / "runs" / "plain-65B-none-r1").mkdir(parents=True)
    (tmp_path / "runs" / "plain-65B-none-r1" / "cell.json").write_text(json.dumps({"status": "ok"}))
    (tmp_path / "runs" / "tls-65B-none-r1").mkdir(parents=True)
    (tmp_path / "runs" / "tls-65B-none-r1" / "cell.json").write_text(json.dumps({"status": "interrupted"}))
    assert [c.cell_id for c in bundles.missing_cells(tmp_path, plan)] == ["tls-65B-none-r1"]


def test_archive_and_verify_on_a_small_bundle(tmp_path):
    b = tmp_path / "b"
    (b / "runs" / "c" / "pki").mkdir(parents=True)
    (b / "runs" / "c" / "keylogs").mkdir()
    (b / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    (b / "runs" / "c" / "metrics.json").write_text("{}")
    (b / "runs" / "c" / "pki" / "server.key").write_text("secret")
    (b / "runs" / "c" / "pki" / "ca.crt").write_text("public")
    (b / "runs" / "c" / "keylogs" / "publisher.keys").write_text("CLIENT_RANDOM a b")
    dest, excluded = archive.archive(b)
    assert sorted(excluded) == ["runs/c/keylogs/publisher.keys", "runs/c/pki/server.key"]
    checked, problems = archive.verify(dest)
    assert checked == 3 and problems == []
    dest2, excluded2 = archive.archive(b, include_secrets=True, dest=tmp_path / "all.tar.gz")
    assert excluded2 == [] and archive.verify(dest2)[0] == 5


def test_the_blocked_order_runs_each_lab_configuration_as_one_block_in_a_seeded_order():
    plan = SweepPlan(payloads=[65, 100, 200], scenarios=["plain", "tls"], impairments=["none", "wifi-good"],
                     repeat=2, seed=5)
    cells, blocks = plan.cells(), plan.blocks()
    assert [c for b in blocks for c in b] == cells and len(cells) == 24 and len({c.cell_id for c in cells}) == 24
    assert len(blocks) == 8 and {len(b) for b in blocks} == {3}  # 2 scenarios x 2 profiles x 2 repeats, 3 payloads
    for block in blocks:
        assert len({(c.scenario, c.impairment, c.devices, c.repeat) for c in block}) == 1
    assert cells == SweepPlan(**{**plan.model_dump(), "order": "blocked"}).cells()  # the seed decides
    other = SweepPlan(**{**plan.model_dump(), "seed": 6}).cells()
    assert other != cells and sorted(c.cell_id for c in other) == sorted(c.cell_id for c in cells)
    record = plan.order_record()
    assert record["mode"] == "blocked" and record["blocks"] == [[c.cell_id for c in b] for b in blocks]


def test_the_random_order_mixes_blocks_and_as_listed_keeps_the_product():
    plan = SweepPlan(payloads=[65, 100, 200], scenarios=["plain", "tls"], order="random", seed=3)
    assert len(plan.blocks()) > 2  # consecutive cells of one scenario only by chance
    listed = SweepPlan(payloads=[65, 100], order="as-listed").cells()
    assert [c.cell_id for c in listed] == ["plain-65B-none-r1", "tls-65B-none-r1", "plain-100B-none-r1",
                                           "tls-100B-none-r1"]
