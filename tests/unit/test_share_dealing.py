"""A fleet across hosts, the model's side (issue 40, parts 1 and 2): the shares' dealing
(orchestrator/model/shares.py, the fleet program's fleet_share.cpp in Python: tests/firmware/test_fleet_shares.py
holds the two equal), ids as wide as the fleet needs, the minimum payload following them, and the per-host limit
of a run on this host (rule fleet-fits-one-host)."""

from __future__ import annotations

import random

import pytest

from orchestrator.clients.payload import parse_message
from orchestrator.clients.subscriber import csv_device
from orchestrator.model import shares
from orchestrator.model.axes import AXES, MAX_DEVICES, MAX_DEVICES_PER_HOST
from orchestrator.model.rules import fleet_device_id, index_digits, payload_min_size
from orchestrator.model.run import RunSpec


def _direct(devices: int, weights: list[int]) -> list[int]:
    """Smooth weighted round-robin step by step, without the period or the gcd: the reference."""
    credit, total, out = [0] * len(weights), sum(weights), []
    for _ in range(devices):
        for k, w in enumerate(weights):
            credit[k] += w
        best = max(range(len(weights)), key=lambda k: (credit[k], -k))
        credit[best] -= total
        out.append(best)
    return out


def test_equal_weights_deal_as_the_worker_processes_do() -> None:
    for k in (1, 2, 3, 7):
        assert shares.deal(50, [4] * k) == [i % k for i in range(50)]


def test_the_dealing_is_smooth_weighted_round_robin() -> None:
    rng = random.Random(40)
    cases = [[1, 2], [2, 1], [3, 1, 1], [5, 3, 2], [100, 1], [1, 100, 7, 7]]
    cases += [[rng.randint(1, 12) for _ in range(rng.randint(1, 6))] for _ in range(40)]
    for weights in cases:
        devices = rng.randint(0, 400)
        dealt = shares.deal(devices, weights)
        assert dealt == _direct(devices, weights), weights
        assert [shares.share_of(i, weights) for i in range(devices)] == dealt
        every = sorted(i for k in range(len(weights)) for i in shares.share_devices(devices, weights, k))
        assert every == list(range(devices)), "each device in exactly one share"
        assert shares.share_sizes(devices, weights) == [dealt.count(k) for k in range(len(weights))]


def test_every_stretch_of_the_fleet_is_spread_by_weight() -> None:
    """After any n devices a share has its weight's part of them to within one device: the connect rate is spread
    over the hosts by weight all along the start, not host after host."""
    weights = [1, 2, 5]
    dealt = shares.deal(1000, weights)
    for n in range(1, 1001):
        for k, w in enumerate(weights):
            assert abs(dealt[:n].count(k) - n * w / sum(weights)) < 1, (n, k)


@pytest.mark.parametrize("weights", [[], [0], [1, -1], [101], [1.5], [True], [1] * 257])
def test_weights_out_of_range_are_refused(weights: list[object]) -> None:
    with pytest.raises(ValueError, match=r"share weights: expected 1\.\.256 whole numbers 1\.\.100"):
        shares.check_weights(weights)  # type: ignore[arg-type]


def test_share_index_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"share index 2: 2 share\(s\), 0\.\.1"):
        shares.share_devices(10, [1, 1], 2)


def test_ids_are_as_wide_as_the_fleet_needs() -> None:
    assert [index_digits(n) for n in (1, 2, 10_000, 10_001, 100_000, 100_001, MAX_DEVICES)] == [4, 4, 4, 5, 5, 6, 6]
    assert (fleet_device_id(0, 10_000), fleet_device_id(9999, 10_000)) == ("f0000", "f9999")  # today's ids
    assert (fleet_device_id(0, 10_001), fleet_device_id(10_000, 10_001)) == ("f00000", "f10000")
    assert fleet_device_id(999_999, MAX_DEVICES) == "f999999"


def test_the_minimum_payload_follows_the_id_width() -> None:
    assert payload_min_size(200, "f9999") == 65 and payload_min_size(200, "f10000") == 66
    wide = {"scenario": "plain", "devices": 10_001, "inventory": "/lab/inventory.yml", "samples": 200}
    with pytest.raises(ValueError, match=r"payload 65 B is below the minimum of 66 B for 200 samples \(device id "
                                         r"'f10000'\).*\(rule payload-fits\)"):
        RunSpec(**wide, payload=65)
    assert RunSpec(**wide, payload=66).devices == 10_001
    assert RunSpec(scenario="plain", devices=10_000, samples=200, payload=65).devices == 10_000


def test_a_run_on_this_host_holds_one_host_s_share() -> None:
    assert AXES["devices"].le == MAX_DEVICES == 1_000_000 and MAX_DEVICES_PER_HOST == 10_000
    with pytest.raises(ValueError, match=r"--devices 10001: one host runs at most 10000 devices of a fleet .* a "
                                         r"bigger fleet runs across the publisher hosts of a lab inventory "
                                         r"\(--inventory, docs/multi-host.md\), each its share \(rule "
                                         r"fleet-fits-one-host\)"):
        RunSpec(scenario="plain", devices=10_001, payload=66)
    lab = {"scenario": "plain", "payload": 67, "inventory": "/lab/inventory.yml"}
    assert RunSpec(**lab, devices=MAX_DEVICES).devices == MAX_DEVICES
    with pytest.raises(ValueError, match=r"less than or equal to 1000000"):
        RunSpec(**lab, devices=MAX_DEVICES + 1)


def test_wide_ids_are_read_from_the_payload_and_logged() -> None:
    payload = b'{"d":"f999999","n":3,"t":1796631643498642,"s":[1,4095,4095,9999]}'
    assert parse_message(payload) == ("f999999", 3, 1796631643498642)
    assert csv_device("f100000") == "f100000"
