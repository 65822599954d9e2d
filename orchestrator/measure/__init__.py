"""Measuring: one run (its lifecycle: start, gate, wait by counting, stop, teardown) against a site, and the sweep."""
