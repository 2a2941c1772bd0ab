"""The ``pyrmq`` command line run in this process: ``run_pyrmq(*args)`` calls
services/launcher/cli.py ``main`` with stdout and stderr captured and gives (exit code, stdout,
stderr), as ``python -m services.launcher.cli ARGS`` would, without starting an interpreter for
each command (~0.8 s each on a 2-core machine). ``pyrmq(*args)`` gives the same as a subprocess.CompletedProcess. The module entry itself (``python -m``, the exit
code through ``sys.exit``) is run as a subprocess by the tests that start ``pyrmq up`` and by
tests/test_admin_cli.py's unreachable-endpoint test."""

from __future__ import annotations

import contextlib
import io
import subprocess

from services.launcher.cli import main


def run_pyrmq(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``pyrmq ARGS``; an argparse error's SystemExit is its code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1 if exited.code else 0
    return code, out.getvalue(), err.getvalue()


def pyrmq(*args: str) -> subprocess.CompletedProcess[str]:
    """``run_pyrmq`` as a CompletedProcess (returncode, stdout, stderr)."""
    code, out, err = run_pyrmq(*args)
    return subprocess.CompletedProcess(["pyrmq", *args], code, out, err)
