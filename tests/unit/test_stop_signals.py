"""SIGTERM and SIGHUP mean what Ctrl-C means for every command, and cleanup holds all three back (issue 23
part 2). Each case runs in its own Python process, since it sends signals to itself."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

COMMAND = textwrap.dedent("""
    import os, signal, threading, time, typer
    from orchestrator.cli import main as cli
    from orchestrator.signals import sigint_deferred

    @cli.app.command("slow-for-test")
    def slow() -> None:
        try:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.{sig})).start()
            time.sleep(30)
            print("not interrupted")
        finally:
            with sigint_deferred():  # the teardown: a second signal must not abandon it
                os.kill(os.getpid(), signal.{sig})
                time.sleep(0.2)
                print("cleanup finished", flush=True)

    raise SystemExit(cli.main(["slow-for-test"]))
""")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_tears_down_like_ctrl_c_and_cleanup_finishes(sig: str) -> None:
    proc = subprocess.run([sys.executable, "-c", COMMAND.format(sig=sig)], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "cleanup finished" in proc.stdout
    assert "not interrupted" not in proc.stdout
    assert "interrupted" in proc.stderr and "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_signals_held_during_cleanup_become_one_interrupt_afterwards() -> None:
    code = textwrap.dedent("""
        import os, signal
        from orchestrator.signals import install_stop_signals, sigint_deferred
        install_stop_signals()
        done = []
        try:
            with sigint_deferred():
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                    os.kill(os.getpid(), sig)
                done.append("all steps")
        except KeyboardInterrupt as exc:
            print(done, "then", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert proc.stdout.strip() == "['all steps'] then SIGTERM", proc.stdout + proc.stderr
