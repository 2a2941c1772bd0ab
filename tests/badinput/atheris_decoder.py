"""Coverage-guided fuzzing with atheris (``make fuzz`` only) of two decoders: the CommitLog
record decoder and the remoting frame decoder (services/domain/remoting/command.py); the input's
first byte picks one.

    .venv/bin/python tests/badinput/atheris_decoder.py [-max_total_time=300] [corpus_dir]

Any exception from ``decode_record`` other than ``CorruptRecord``, or from the remoting
``decode`` other than ``FrameError``, is a crash (atheris saves
the input as crash-<sha1>). Without atheris installed this prints a note and exits 0: CI and
``make test`` never depend on it.
"""

from __future__ import annotations

import sys

try:
    import atheris
except ImportError:  # optional: pip install atheris
    print("atheris is not installed; skipping the coverage-guided decoder fuzz (pip install atheris)")
    sys.exit(0)

with atheris.instrument_imports():
    from services.domain.format.commitlog_format import BLANK, CorruptRecord, MessageRecord, decode_record
    from services.domain.remoting.command import FrameError, RemotingCommand
    from services.domain.remoting.command import decode as decode_frame


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 1) == 1:
        frame = fdp.ConsumeBytes(fdp.remaining_bytes())
        try:
            command = decode_frame(frame)
        except FrameError:
            return
        assert isinstance(command, RemotingCommand)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in command.ext_fields.items())
        return
    check_crc = fdp.ConsumeBool()
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    try:
        result = decode_record(memoryview(raw), 0, len(raw), check_crc=check_crc)
    except CorruptRecord:
        return
    assert result is BLANK or isinstance(result, MessageRecord)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
