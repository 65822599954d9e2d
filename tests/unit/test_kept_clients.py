"""A kept-up lab's client programs run in containers that mount the folder of the run folders
(backends/kept_clients.py): a cell's command line, written for its run folder at /data, names the same files under
/runs/<cell>."""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends.kept_clients import MOUNT, rebase
from orchestrator.lab.topology import subscriber_args
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import load_scenario


def test_every_path_of_the_run_folder_is_rebased_and_nothing_else() -> None:
    lay = Layout(Path("/bundle/runs/tls-65B-none-r1"))
    argv = subscriber_args(load_scenario("tls"), lay)
    rebased = rebase(argv, lay.root)
    assert len(rebased) == len(argv)
    for before, after in zip(argv, rebased, strict=True):
        if before.startswith("/data/"):
            assert after == f"{MOUNT}/tls-65B-none-r1/{before.removeprefix('/data/')}"
        else:
            assert after == before
    assert "/runs/tls-65B-none-r1/logs/subscriber.csv" in rebased and "/runs/tls-65B-none-r1/pki/ca.crt" in rebased


def test_a_value_that_only_looks_like_the_folder_is_left_alone() -> None:
    assert rebase(["/database", "x/data/y", "/data"], Path("/b/runs/c")) == ["/database", "x/data/y", "/runs/c"]
