"""The userspace delay line (images/netadmin/delayline) as plan commands, and its health (kernels without netem).

Where it sits: delay and jitter at the FORWARD hook of the router container between the publisher and
the broker (a forwarding hop: a packet held there no longer counts against the sender's socket, so TCP
Small Queues does not throttle the flow, which it does at the sender's own egress: bench/impairment.py),
upstream of the broker-side capture, which therefore sees every packet delayed. Correlated loss (the
Gilbert model) at the broker's ingress (PREROUTING), downstream of the capture, so lost segments and
their retransmissions are both on the capture; plain loss stays nft's (argv.ingress_argvs).

Each line binds its own NFQUEUE with no bypass: with the line gone, matched packets are dropped (fail
closed), never passed unimpaired. Rules live in our own mangle chains ``TESTBED_Q<queue>``; a line is
stopped (SIGTERM: it releases what it holds) after its rule is deleted.
"""

from __future__ import annotations

import json

from orchestrator.backends.docker import exec_argv
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget, PlanCommand
from orchestrator.backends.process import run
from orchestrator.model.impairment import Distribution, Impairment

DELAY_QUEUE = 7357
LOSS_QUEUE = 7358
LINE = "testbed-delayline"
IPTABLES = "iptables-nft"  # netlink: NET_ADMIN is enough (legacy needs a raw socket, NET_RAW)
ABSENT_RULE = ["No chain/target/match by that name", "Bad rule", "does a matching rule exist",
               "Chain already exists", "No such file or directory", "does not exist"]
HOOK_CHAIN = {Hook.FORWARD: "FORWARD", Hook.INGRESS: "PREROUTING"}


def queue_of(target: ImpairmentTarget) -> int:
    return DELAY_QUEUE if target.hook is Hook.FORWARD else LOSS_QUEUE


def stats_path(queue: int) -> str:
    return f"/dev/shm/testbed-delayline-{queue}.json"  # /dev/shm stays writable in the read-only helper


def chain(queue: int) -> str:
    return f"TESTBED_Q{queue}"


def delays_at(imp: Impairment, target: ImpairmentTarget) -> bool:
    """The line at ``target`` delays: the router's forwarding hop, or a board's path at the broker's ingress."""
    return bool(imp.delay_ms or imp.jitter_ms) and (target.hook is Hook.FORWARD or target.delays)


def runs_line(imp: Impairment, target: ImpairmentTarget) -> bool:
    """A delay line runs at ``target`` for ``imp``: to delay there, or for the Gilbert loss at an ingress."""
    return delays_at(imp, target) or (target.line and target.hook is Hook.INGRESS and bool(imp.loss_correlation_pct))


def line_options(imp: Impairment, target: ImpairmentTarget, seed: int) -> list[str]:
    """The line's options: delay/jitter at the forwarding hop (or a board's ingress), the Gilbert loss at the
    receiver's ingress."""
    queue = queue_of(target)
    opts = ["--queue", str(queue), "--seed", str(seed + queue), "--stats", stats_path(queue)]
    if delays_at(imp, target):
        dist = "uniform" if imp.distribution is Distribution.UNIFORM else imp.distribution.value
        opts += ["--delay-ms", f"{imp.delay_ms:g}", "--jitter-ms", f"{imp.jitter_ms:g}", "--distribution", dist,
                 "--order", imp.order.value]
    else:
        opts += ["--delay-ms", "0"]
    if target.hook is Hook.INGRESS and imp.loss_correlation_pct:
        opts += ["--loss-pct", f"{imp.loss_pct:g}", "--loss-correlation-pct", f"{imp.loss_correlation_pct:g}"]
    return opts


def _match(target: ImpairmentTarget) -> list[str]:
    m = ["-s", str(target.source_ip)] if target.source_ip else []
    m += ["!", "-s", str(target.source_outside)] if target.source_outside else []
    return m + (["-d", str(target.peer_ip)] if target.peer_ip else [])


def _ipt(helper: str, *args: str) -> list[str]:
    return exec_argv(helper, IPTABLES, "-t", "mangle", *args)


def _wait_for_stats(helper: str, queue: int) -> list[str]:
    path = stats_path(queue)
    return exec_argv(helper, "sh", "-c", f"for i in $(seq 200); do [ -s {path} ] && exit 0; sleep 0.05; done; "
                     f"echo '{LINE} did not bind queue {queue}' >&2; exit 1")


def delay_line_argvs(imp: Impairment, target: ImpairmentTarget, seed: int) -> list[list[str]]:
    """Start the line, wait until it has bound its queue, then send the matched packets to it."""
    helper, queue = str(target.helper), queue_of(target)
    hook = HOOK_CHAIN[target.hook]
    return [
        exec_argv(helper, LINE, *line_options(imp, target, seed), detach=True),
        _wait_for_stats(helper, queue),
        _ipt(helper, "-N", chain(queue)),
        _ipt(helper, "-A", chain(queue), "-j", "NFQUEUE", "--queue-num", str(queue)),
        _ipt(helper, "-I", hook, "1", *_match(target), "-j", chain(queue)),
    ]


def _stop_line(helper: str, queue: int) -> list[str]:
    """SIGTERM to the line (it releases every held packet), then wait until it is gone."""
    path = stats_path(queue)
    script = (f"p=$(sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p' {path} 2>/dev/null | head -1); "
              "[ -n \"$p\" ] || exit 0; kill -TERM \"$p\" 2>/dev/null || exit 0; "
              "for i in $(seq 100); do [ -d /proc/$p ] || exit 0; sleep 0.05; done; "
              f"echo '{LINE} did not stop' >&2; exit 1")
    return exec_argv(helper, "sh", "-c", script)


def clear_commands(target: ImpairmentTarget) -> list[PlanCommand]:
    """The rule first (with the line gone it would drop everything), then the chain, then the line."""
    helper, queue = str(target.helper), queue_of(target)
    argvs = [
        _ipt(helper, "-D", HOOK_CHAIN[target.hook], *_match(target), "-j", chain(queue)),
        _ipt(helper, "-F", chain(queue)),
        _ipt(helper, "-X", chain(queue)),
        _stop_line(helper, queue),
    ]
    return [PlanCommand(label=target.label, argv=a, tolerate=ABSENT_RULE) for a in argvs]


def show_commands(target: ImpairmentTarget) -> list[PlanCommand]:
    helper, queue = str(target.helper), queue_of(target)
    return [PlanCommand(label=target.label, argv=_ipt(helper, "-S"), tolerate=ABSENT_RULE),
            PlanCommand(label=target.label, argv=exec_argv(helper, "cat", stats_path(queue)),
                        tolerate=ABSENT_RULE)]


def line_stats(state: str) -> dict[str, dict]:
    """The delay lines' stats (by queue number) out of a show() text, e.g. the record's ``before_clear``."""
    found: dict[str, dict] = {}
    for queue in (DELAY_QUEUE, LOSS_QUEUE):
        head = f"cat {stats_path(queue)}\n"
        if head not in state:
            continue
        body = state.split(head, 1)[1].split("\n$ ", 1)[0]
        try:
            found[str(queue)] = json.loads(body)
        except ValueError:
            continue  # "(absent: ...)": no line ran there
    return found


def line_problem(target: ImpairmentTarget, *, final: bool = False) -> str | None:
    """What is wrong with the target's line, or None: its stats file, its process, overflows, and at the
    end of the cell (``final``) every queued packet verdicted (accepted + dropped = queued)."""
    helper, queue = str(target.helper), queue_of(target)
    where = f"the delay line ({LINE}, queue {queue}) in {target.container}"
    proc = run(exec_argv(helper, "sh", "-c",
                         f"cat {stats_path(queue)} && p=$(sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p' "
                         f"{stats_path(queue)} | head -1) && [ -d /proc/$p ] && echo ALIVE"), check=False, timeout=30)
    text = proc.stdout.strip()
    if not text:
        return f"{where}: no stats ({(proc.stderr or 'helper gone').strip()[:200]})"
    alive = text.endswith("ALIVE")
    try:
        st = json.loads(text.removesuffix("ALIVE").strip())
    except ValueError:
        return f"{where}: unreadable stats"
    if not alive:
        return f"{where} is not running (pid {st.get('pid')}): the impairment did not hold for the whole cell"
    if not st.get("healthy", False) or st.get("overflows"):
        return f"{where} is unhealthy: {st.get('overflows', 0)} overflows, kernel {st.get('kernel')}"
    if final and st.get("accepted", 0) + st.get("dropped", 0) != st.get("queued", 0):
        return (f"{where}: {st.get('queued')} packets queued but {st.get('accepted')} accepted + "
                f"{st.get('dropped')} dropped")
    return None
