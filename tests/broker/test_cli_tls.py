"""``pyrmq`` commands against each ``tls_mode`` of the client port: plaintext where the port
serves plaintext (both, plaintext), ``--tls --ca-file`` where it serves TLS (both, tls), and a
clear failure otherwise; and a CA file that cannot be read is a one-line error, exit 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from services.broker.tls_cert import self_signed
from services.broker.v2.server import BrokerServer
from services.launcher.cli import main
from services.runtime.clock import SystemClock


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("mode", ["both", "tls", "plaintext"])
def test_commands_work_over_what_the_port_serves(
    make_broker: Callable[..., BrokerServer], tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    broker = make_broker(tls_mode=mode, data_dir=str(tmp_path / "broker"))
    endpoint = f"127.0.0.1:{broker.port}"
    cert = str(tmp_path / "broker" / "tls" / "broker.crt")
    if mode == "plaintext":  # no certificate of its own: a client trusting any one fails the same way
        cert = str(tmp_path / "other.crt")
        Path(cert).write_bytes(self_signed(["127.0.0.1"], SystemClock().now_ms())[0])
    ways = {
        "plaintext": ([], mode in ("both", "plaintext")),
        "tls": (["--tls", "--ca-file", cert], mode in ("both", "tls")),
    }
    topic = f"Cli{mode.title()}"
    for way, (flags, served) in ways.items():
        health = run(capsys, "health", endpoint, "--timeout", "3", *(["--ca-file", cert] if way == "tls" else []))
        assert (health[0] == 0) == served, (way, health)
        if not served:
            failed = run(capsys, "topic", "list", "--endpoint", endpoint, "--timeout", "3", *flags)
            assert failed[0] != 0 and "UNAVAILABLE" in failed[2] + failed[1], failed
            continue
        name = f"{topic}{way.title()}"
        code, _, err = run(capsys, "topic", "create", name, "--type", "NORMAL", "--endpoint", endpoint, *flags)
        assert code == 0, err
        code, out, err = run(capsys, "topic", "list", "--json", "--endpoint", endpoint, *flags)
        assert code == 0 and name in {t["name"] for t in json.loads(out)["topics"]}, (out, err)
        code, out, err = run(capsys, "send", name, f"over {way}", "--endpoint", endpoint, *flags)
        assert code == 0, err
        code, out, err = run(
            capsys,
            "consume",
            name,
            "--group",
            f"G{way}",
            "--max",
            "1",
            "--endpoint",
            endpoint,
            "--wait-seconds",
            "5",
            *flags,
        )
        assert code == 0 and f"over {way}" in out, (out, err)


def test_an_unreadable_ca_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.crt")
    for args in (["health", "127.0.0.1:1", "--ca-file", missing], ["topic", "list", "--tls", "--ca-file", missing]):
        code, _, err = run(capsys, *args)
        assert code == 2 and f"cannot read TLS file {missing}" in err, err
