"""`testbed impair`: impairment on the router hosts of a multi-host lab (docs/multi-host.md).

On one Docker host, use `--impairment` on run/sweep/up instead: those apply it to the
containers' namespaces and always clear it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.console import out

app = typer.Typer(no_args_is_help=True, help="Impairment on the router hosts of an Ansible inventory.")

Inventory = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory with groups broker, "
                                                                   "router, publisher")]


def _targets(inventory: Path):  # noqa: ANN202 - list[ImpairmentTarget]
    from orchestrator.backends.impairment import load_inventory, targets_for_router

    return targets_for_router(load_inventory(inventory))


@app.command("apply")
def apply_cmd(profile: Annotated[str, typer.Argument(help="profile name or YAML file")],
              inventory: Inventory) -> None:
    """Apply PROFILE on the router hosts (left applied until `testbed impair clear`)."""
    from orchestrator.backends.impairment import apply
    from orchestrator.model.impairment import load_impairment

    imp = load_impairment(profile)
    state = apply(imp, _targets(inventory), inventory=inventory)
    out.print(state, highlight=False, markup=False)
    out.print(f"impairment {imp.name} applied on the routers of {inventory}; `testbed impair clear` removes it")


@app.command("show")
def show_cmd(inventory: Inventory) -> None:
    """tc qdisc and nft state of the router interfaces."""
    from orchestrator.backends.impairment import show

    out.print(show(_targets(inventory), inventory=inventory), highlight=False, markup=False)


@app.command("clear")
def clear_cmd(inventory: Inventory) -> None:
    """Remove our qdiscs and nft table from the router interfaces; safe twice."""
    from orchestrator.backends.impairment import clear

    clear(_targets(inventory), inventory=inventory)
    out.print(f"impairment cleared on the routers of {inventory}")
