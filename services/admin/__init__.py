"""The ``pyrmq`` admin commands (``pyrmq topic|group|consumer|message ...``): a client of the
broker's ``pyrmq.admin.v1.Admin`` service. See ``cli.py``."""
