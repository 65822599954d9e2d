"""A fleet's shares: the part of a fleet (``--devices N``) one publisher host runs.

Not the fleet's "shards": those are the worker processes one fleet program splits its devices into
(firmware/platformio/host/src/fleet/fleet_shard.h). The devices 0..N-1 are dealt to the shares by weight,
interleaved: smooth weighted round-robin. At each device every share's credit grows by its weight; the share
with the most credit (the lowest index on a tie) takes the device and gives back the weights' total. Equal
weights deal ``i % K``, as the fleet deals devices to its worker processes, and any stretch of the fleet is
spread over the shares by weight, so that the connect rate is too. The dealing repeats every
``sum(weights) / gcd(weights)`` devices (the credits are back to 0).

This is the fleet program's own dealing (firmware/platformio/host/src/fleet/fleet_share.cpp, given
``--share-weights W0,W1,... --share-index k``), which tests/firmware/test_fleet_shares.py holds equal to this
one. Every device keeps its global index, id, seeds and its start slot ``i / connect_rate`` on the fleet's
timeline, whichever share runs it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

MAX_SHARES = 256  # fleet_share.h kMaxShares: --share-weights lists at most this many
MAX_SHARE_WEIGHT = 100  # fleet_share.h kMaxShareWeight: each weight a whole number 1..this


def check_weights(weights: Sequence[int]) -> tuple[int, ...]:
    """The weights as the fleet takes them (1..MAX_SHARES whole numbers 1..MAX_SHARE_WEIGHT); ValueError else."""
    ws = tuple(weights)
    if not 1 <= len(ws) <= MAX_SHARES or any(
            isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_SHARE_WEIGHT for w in ws):
        raise ValueError(f"share weights: expected 1..{MAX_SHARES} whole numbers 1..{MAX_SHARE_WEIGHT} (one per "
                         f"publisher host), got {list(ws)}")
    return ws


@functools.lru_cache(maxsize=64)
def share_period(weights: tuple[int, ...]) -> tuple[int, ...]:
    """One period of the dealing: ``period[j]`` is the share of every device ``i`` with ``i % len(period) == j``."""
    ws = check_weights(weights)
    g = functools.reduce(math.gcd, ws)
    steps = [w // g for w in ws]
    total = sum(steps)
    credit = [0] * len(steps)
    period: list[int] = []
    for _ in range(total):
        best = 0
        for k, w in enumerate(steps):
            credit[k] += w
            if credit[k] > credit[best]:
                best = k
        credit[best] -= total
        period.append(best)
    return tuple(period)


def share_of(index: int, weights: Sequence[int]) -> int:
    """The share that runs device ``index`` (its global index, 0-based)."""
    period = share_period(tuple(weights))
    return period[index % len(period)]


def deal(devices: int, weights: Sequence[int]) -> list[int]:
    """The share of every device 0..devices-1."""
    period = share_period(tuple(weights))
    n = len(period)
    whole, rest = divmod(devices, n)
    return list(period) * whole + list(period[:rest])


def share_devices(devices: int, weights: Sequence[int], k: int) -> list[int]:
    """The global indices (ascending) of the devices of share ``k``."""
    period = share_period(tuple(weights))
    if not 0 <= k < len(weights):
        raise ValueError(f"share index {k}: {len(weights)} share(s), 0..{len(weights) - 1}")
    places = [j for j, s in enumerate(period) if s == k]
    n = len(period)
    return [base + j for base in range(0, devices, n) for j in places if base + j < devices]


def share_sizes(devices: int, weights: Sequence[int]) -> list[int]:
    """How many devices each share runs."""
    period = share_period(tuple(weights))
    whole, rest = divmod(devices, len(period))
    return [whole * period.count(k) + period[:rest].count(k) for k in range(len(weights))]
