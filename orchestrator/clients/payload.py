"""Read the sequence number and send time out of a sample's payload.

Two formats: ours (a JSON object written by the firmware core:
``{"d":"v1","n":<seq>,"t":<send us>,"s":[...],"x":"..."}``) and the reference captures'
ASCII ``%08d,%019d,`` (sequence, send time in ns) padded with ``x``.
"""

from __future__ import annotations

import json


def parse_payload(data: bytes) -> tuple[int, int] | None:
    """Return (seq, t_send_us), or None when the payload is in neither format."""
    head = data[:1]
    if head == b"{":
        try:
            obj = json.loads(data)
            return int(obj["n"]), int(obj["t"])
        except (ValueError, KeyError, TypeError):
            return None
    parts = data.split(b",", 2)
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1]) // 1000
    return None
