#!/usr/bin/python
"""Run a list of argv lists on the host in ONE module call (ansible's loop over `command` costs a module
start, about 0.4 s, per item: a plan of 40 commands took 37 s to apply that way, now about 3 s).

Options: commands (list of {label, argv, tolerate}); changes (bool: report changed). Every command runs,
in order, like a loop; a command fails unless its exit code is 0 or its stderr holds one of its
`tolerate` fragments. The result's `testbed_items` has one entry per command (item, rc, stdout,
stderr, failed); the task fails when any command failed. Each step of impair.yml, clear.yml and show.yml
is one task of it, named by the step (an include_tasks per step cost Ansible 0.1-0.3 s more each); the
preflight's check runs through tasks/run_commands.yml.

Consecutive commands that enter the same container (``docker exec CONTAINER ...``, no exec options) run in
ONE ``docker exec CONTAINER sh -c SCRIPT`` (each exec costs 0.1-0.2 s on a loaded host, a step has up to 8):
the script still runs each command on its own, in order, and brackets its stdout and stderr with markers
and its exit code, so every command keeps its own item as if it had had its own exec.
"""

from __future__ import annotations

import os
import secrets
import shlex
from collections.abc import Callable

from ansible.module_utils.basic import AnsibleModule

Runner = Callable[[list[str], bool], tuple[int, str, str]]  # (argv, expand ~ and $VARS in it) -> rc, out, err


def _item(cmd: dict, argv: list[str], rc: int, out: str, err: str) -> dict:
    tolerated = rc != 0 and any(t in (err or "") for t in cmd.get("tolerate") or [])
    return {"item": cmd, "cmd": argv, "rc": rc, "stdout": out, "stderr": err, "failed": rc != 0 and not tolerated}


def _argv(cmd: dict) -> list[str]:
    return [str(a) for a in cmd.get("argv") or []]


def container_of(argv: list[str]) -> str | None:
    """The container of a plain ``docker exec CONTAINER COMMAND...`` (None for anything else, e.g. ``exec -d``)."""
    if len(argv) > 3 and argv[:2] == ["docker", "exec"] and not argv[2].startswith("-"):
        return argv[2]
    return None


def batches(commands: list[dict]) -> list[list[dict]]:
    """The commands in order, consecutive ones into the same container together."""
    out: list[list[dict]] = []
    for cmd in commands:
        where = container_of(_argv(cmd))
        if out and where is not None and container_of(_argv(out[-1][0])) == where:
            out[-1].append(cmd)
        else:
            out.append([cmd])
    return out


def _between(text: str, start: str, end: str) -> str | None:
    """What the script printed for one command: after its ``start`` line, before the newline of its ``end``."""
    if start not in text or end not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0]


def _run_batch(run: Runner, batch: list[dict]) -> list[dict]:
    container = str(container_of(_argv(batch[0])))
    tag = f"@@testbed-{secrets.token_hex(8)}"
    parts = []
    for i, cmd in enumerate(batch):
        mark = shlex.quote(f"{tag}-{i}")
        # ~ and $VARS expanded here as run_command would have in a command of its own; the script is not expanded
        words = [os.path.expandvars(os.path.expanduser(w)) for w in _argv(cmd)[3:]]
        parts.append(f"printf '%s\\n' {mark}; printf '%s\\n' {mark} >&2; {shlex.join(words)}; "
                     f"rc=$?; printf '\\n%s-end %s\\n' {mark} $rc; printf '\\n%s-end\\n' {mark} >&2")
    rc, out, err = run(["docker", "exec", container, "sh", "-c", "\n".join(parts)], False)
    items = []
    for i, cmd in enumerate(batch):
        start, end = f"{tag}-{i}\n", f"\n{tag}-{i}-end"
        stdout, stderr = _between(out, start, end + " "), _between(err, start, end + "\n")
        code = (out.split(end + " ", 1)[1].split("\n", 1)[0] if stdout is not None else "")
        if stdout is None or stderr is None or not code.strip().isdigit():  # the exec itself failed: no marker
            leftover = err.split(tag, 1)[0] if tag in err else err
            items.append(_item(cmd, _argv(cmd), rc or 1, "", leftover))
            continue
        items.append(_item(cmd, _argv(cmd), int(code), stdout, stderr))
    return items


def run_commands(run: Runner, commands: list[dict]) -> list[dict]:
    """One item per command, in order; a batch of one runs as it is."""
    items: list[dict] = []
    for batch in batches(commands):
        if len(batch) == 1:
            argv = _argv(batch[0])
            items.append(_item(batch[0], argv, *run(argv, True)))
        else:
            items += _run_batch(run, batch)
    return items


def main() -> None:
    module = AnsibleModule(argument_spec={"commands": {"type": "list", "elements": "dict", "required": True},
                                          "changes": {"type": "bool", "default": False}})
    items = run_commands(lambda argv, expand: module.run_command(argv, check_rc=False, expand_user_and_vars=expand),
                         module.params["commands"])
    failed = [it for it in items if it["failed"]]
    result = {"changed": bool(module.params["changes"]), "testbed_items": items}
    if failed:
        first = failed[0]
        module.fail_json(msg=f"{len(failed)} of {len(items)} commands failed; first: {' '.join(first['cmd'])} "
                             f"(rc {first['rc']})", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
