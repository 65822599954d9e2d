"""`testbed doctor`: what works on this machine for the user who runs it, each missing piece with its fix (checks.py;
the checks that start throwaway containers in probes.py)."""
