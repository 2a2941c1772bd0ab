"""Offline Spark jobs over a store root's files: export, rebuild, audit, stats (``cli.py``)."""
