"""Measuring: one run (its lifecycle: start, gate, wait by counting, stop, teardown), the sweep, doctor."""
