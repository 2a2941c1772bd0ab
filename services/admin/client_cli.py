"""``pyrmq send``, ``pyrmq consume`` and ``pyrmq bench``: try a topic by hand (placeholder, being built)."""
from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``send``, ``consume`` and ``bench`` to ``pyrmq``'s subcommands."""
