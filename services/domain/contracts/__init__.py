"""The messages one service writes for another to read, each contract's writer and reader in one
module: ``parking`` (a message held in a system topic keeps its real topic and queue),
``delay`` (delay-level and timer messages, broker -> scheduler) and ``transaction`` (half
messages and op records, broker -> txcheck and back). Pure: no I/O, imports nothing of the
project outside ``services.domain``.
"""
