"""Fixtures of the firmware host tests (defined in fwtest_support)."""

from fwtest_support import broker_factory, host_build, pki  # noqa: F401
