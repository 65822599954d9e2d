"""A run folder's analysis: its raw files (capture, logs, key logs, cell.json) through analysis/ into its tables and
metrics.json, after a run and for `testbed report` (analyse.py; a lab's additions in labanalysis.py, exchanges.csv in
exchanges.py). Here, not in analysis/, because it runs tshark and asks the run's publisher variant."""
