"""A link that goes down and comes back (issue 27's link-down event): every packet into and out of a container's
network namespace but loopback dropped by nftables, both ways, then the table deleted. Run in the impairment
helper of that container (helpers.py: NET_ADMIN only, sharing its namespace); no netem needed. The table is our
own (``inet testbed_linkdown``), so an impairment's ``testbed_impair`` beside it is untouched.
"""

from __future__ import annotations

from orchestrator.backends import docker
from orchestrator.backends.impairment import helpers
from orchestrator.backends.impairment.models import helper_name
from orchestrator.backends.process import run
from orchestrator.errors import ToolError

TABLE = ("inet", "testbed_linkdown")


def down_script() -> str:
    """One nft transaction (``nft -f -``: the link goes down at once) that drops everything but loopback, both ways."""
    table = " ".join(TABLE)
    return (f"table {table} {{\n"
            "  chain in { type filter hook input priority -300; policy accept; iifname != \"lo\" counter drop; }\n"
            "  chain out { type filter hook output priority -300; policy accept; oifname != \"lo\" counter drop; }\n"
            "}\n")


def link_up_argv() -> list[str]:
    return ["nft", "delete", "table", *TABLE]


class LinkDown:
    """The link of one container: down() drops it, up() restores it, close() removes the helper it started."""

    def __init__(self, container: str) -> None:
        self.container = container
        self.helper = helper_name(container)
        c = docker.container(self.helper)
        self._own_helper = c is None or not c.state.running  # an impairment's helper is reused, never removed
        self.is_down = False

    def _exec(self, argv: list[str], *, check: bool = True, script: str | None = None) -> str:
        return run(docker.exec_argv(self.helper, *argv, stdin=bool(script)), check=check, timeout=15,
                   input_text=script).stdout

    def prepare(self) -> None:
        if self._own_helper:
            helpers.start_helpers([self.container])

    def down(self) -> None:
        self.is_down = True
        self._exec(["nft", "-f", "-"], script=down_script())

    def dropped(self) -> str:
        """The table's counters as nft lists them (what was dropped), '' when it is gone."""
        return self._exec(["nft", "list", "table", *TABLE], check=False)

    def up(self) -> None:
        try:
            self._exec(link_up_argv())
        except ToolError:
            if "testbed_linkdown" in self.dropped():
                raise
        self.is_down = False

    def up_counted(self) -> str:
        """The link restored, its counters read just before in the same exec (what was dropped): one helper call at
        the outage's end, so it ends on time (read apart, first, the counters' own call lengthened a 1.5 s outage to
        1.8-2.1 s on a loaded machine)."""
        table = " ".join(TABLE)
        proc = run(docker.exec_argv(self.helper, "sh", "-c", f"nft list table {table} && nft delete table {table}"),
                   check=False, timeout=15)
        if proc.returncode != 0:
            self.up()  # the plain way: raises when the table stays
        self.is_down = False
        return proc.stdout

    def close(self) -> None:
        if self.is_down:
            self.up()
        if self._own_helper:
            helpers.remove_helpers([self.container])
