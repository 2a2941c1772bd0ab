"""``pyrmq status``: every service's health, topics, queue depths and lags (placeholder, being built)."""
from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``status`` to ``pyrmq``'s subcommands."""
