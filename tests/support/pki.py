"""A throwaway PKI made with openssl for TLS tests: a CA, a server certificate for 127.0.0.1
(no extended key usage, so it serves as a client certificate too) and a client certificate."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(directory: Path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, signed by the CA."""
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=pyrmq-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=directory,
    )
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"), ("client", "")):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN=pyrmq-{name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=directory,
        )
        (directory / f"{name}.ext").write_text(extension + "\n" if extension else "basicConstraints=CA:FALSE\n")
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            f"{name}.pem",
            "-extfile",
            f"{name}.ext",
            cwd=directory,
        )
    return {name: str(directory / name) for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}
