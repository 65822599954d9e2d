"""Read the device id, sequence number and send time out of a sample's payload.

Two formats: ours (a JSON object written by the firmware core:
``{"d":"v1","n":<seq>,"t":<send us>,"s":[...],"x":"..."}``) and the reference captures'
ASCII ``%08d,%019d,`` (sequence, send time in ns) padded with ``x``, which names no device.
"""

from __future__ import annotations

import json
import re

_INT = rb"-?(?:0|[1-9][0-9]*)"
_TEXT = rb'"[\x20\x21\x23-\x5b\x5d-\x7e]*"'  # printable ASCII without quote or backslash: no escapes
# The firmware's exact layout (payload.cpp), every byte of it; anything else goes through json. A
# payload this matches is valid JSON with these three keys once each, so json.loads would give the same.
_FIRMWARE = re.compile(rb'\{"d":(' + _TEXT + rb'),"n":(' + _INT + rb'),"t":(' + _INT + rb'),"s":\[' + _INT
                       + rb"(?:," + _INT + rb")*\]" + rb'(?:,"x":' + _TEXT + rb")? *\}")


def parse_message(data: bytes) -> tuple[str, int, int] | None:
    """Return (device, seq, t_send_us), or None when the payload is in neither format.

    ``device`` is the JSON's ``d`` as text ("" when absent, and for the ASCII format)."""
    head = data[:1]
    if head == b"{":
        fast = _FIRMWARE.fullmatch(data)
        if fast is not None:
            return fast[1][1:-1].decode("ascii"), int(fast[2]), int(fast[3])
        try:
            obj = json.loads(data)
            device = obj.get("d", "")
            return (device if isinstance(device, str) else str(device)), int(obj["n"]), int(obj["t"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
    parts = data.split(b",", 2)
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return "", int(parts[0]), int(parts[1]) // 1000
    return None


def parse_payload(data: bytes) -> tuple[int, int] | None:
    """Return (seq, t_send_us), or None when the payload is in neither format."""
    parsed = parse_message(data)
    return None if parsed is None else (parsed[1], parsed[2])
