"""Why the Docker socket refused this user, in words that name the fix (used by docker.engine_version)."""

from __future__ import annotations

import os
import re
from pathlib import Path

SOCKET_HINT = ("add yourself to the socket's group: `sudo usermod -aG docker $USER`, then log in again (or "
               "`newgrp docker`); or use rootless Docker or Docker Desktop")


def denied_message(stderr: str, default_host: str) -> str:
    """What `docker` refused, for whom: the socket it named (else the default one) and why, from the
    socket's group and this process's groups (a user added to the group must log in again first)."""
    found = re.search(r"(?:socket|API) at (\S+?):?(?:\s|$)", stderr)
    host = found.group(1) if found else default_host
    why = "you are not in its group"
    path = Path(host.removeprefix("unix://"))
    try:
        import grp
        import pwd

        st = path.stat()
        group = grp.getgrgid(st.st_gid)
        why = f"you are not in its group ({group.gr_name})"
        if group.gr_gid in os.getgroups():
            why = (f"you are in its group ({group.gr_name}), but its mode {st.st_mode & 0o777:o} does not "
                   "let the group in")
        elif pwd.getpwuid(os.getuid()).pw_name in group.gr_mem:
            why = f"you were added to its group ({group.gr_name}), but this login session is not in it yet"
    except (ImportError, OSError, KeyError):
        pass
    return f"permission denied on the Docker socket ({host}): {why}"
