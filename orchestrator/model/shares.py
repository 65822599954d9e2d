"""A fleet dealt over several publisher hosts: which host's share each device is in.

The fleet program takes ``--share-weights W0,W1,... --share-index k`` and runs the devices of share k only; each
device keeps its global index, id, seeds and start slot. The dealing is a smooth weighted round robin (the one
nginx uses for its upstreams): at each device every share's credit grows by its weight, the share with the most
credit (the lowest index on a tie) takes the device and gives back the total of the weights. Equal weights deal
``i % K``; weights 2,1 deal 0,1,0,0,1,0,...: interleaved, so every share's devices spread over the whole connect
phase and the connect rate is spread over the hosts. This is the Python twin of the fleet's own dealing
(firmware/platformio/host/src/fleet/), which must agree with it device by device.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_SHARE_WEIGHT = 100  # the fleet's own limit on each weight (--share-weights)


def check_weights(weights: Sequence[int]) -> None:
    if not weights or any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_SHARE_WEIGHT
                          for w in weights):
        raise ValueError(f"share weights must be whole numbers 1..{MAX_SHARE_WEIGHT}, got {list(weights)}")


def deal(devices: int, weights: Sequence[int]) -> list[int]:
    """The share of each device 0..devices-1."""
    check_weights(weights)
    total = sum(weights)
    credit = [0] * len(weights)
    out = []
    for _ in range(devices):
        for k, w in enumerate(weights):
            credit[k] += w
        k = max(range(len(weights)), key=lambda j: (credit[j], -j))
        credit[k] -= total
        out.append(k)
    return out


def share_of(device: int, weights: Sequence[int]) -> int:
    """The share device ``device`` belongs to."""
    return deal(device + 1, weights)[device]


def share_sizes(devices: int, weights: Sequence[int]) -> list[int]:
    """How many devices each share gets."""
    dealt = deal(devices, weights)
    return [dealt.count(k) for k in range(len(weights))]
