"""epochFileCheckpoint text format and the EpochCache rules (RocketMQ 5's EpochFileCache)."""

from __future__ import annotations

import pytest

from services.domain.epoch_cache import EpochCache
from services.domain.format.epoch_file_format import (
    END_OFFSET_UNKNOWN,
    EpochEntry,
    EpochFileError,
    decode_epoch_file,
    encode_epoch_file,
)


def test_format_round_trip_and_derived_end_offsets():
    text = encode_epoch_file([EpochEntry(1, 0), EpochEntry(3, 4096), EpochEntry(4, 4096)])
    assert text == "3\n1-0\n3-4096\n4-4096\n"
    assert decode_epoch_file(text) == [
        EpochEntry(1, 0, 4096),
        EpochEntry(3, 4096, 4096),
        EpochEntry(4, 4096, END_OFFSET_UNKNOWN),
    ]
    assert encode_epoch_file(decode_epoch_file(text)) == text
    assert decode_epoch_file(encode_epoch_file([])) == []


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("", "empty"),
        ("1\n1-0", "not terminated"),
        ("2\n1-0\n", "expects 2 entries, found 1"),
        ("x\n", "entry count"),
        ("1\n1:0\n", "line 2"),
        ("1\n1-0-5\n", "line 2"),
        ("1\n-1-0\n", "line 2"),
        ("1\n1-\n", "startOffset ''"),
        ("1\n2147483648-0\n", "epoch 2147483648 is out of range"),
        ("1\n1-9223372036854775808\n", "out of range"),
        ("2\n2-0\n1-10\n", "line 3: epoch 1 does not follow epoch 2"),
        ("2\n1-10\n2-5\n", "line 3: startOffset 5 goes back"),
        ("1\n1-" + "0" * 70 + "\n", "longer than"),
        ("1\n1-١٢\n", "not a decimal"),
    ],
)
def test_malformed_files_are_refused_with_the_line(text, complaint):
    with pytest.raises(EpochFileError, match=complaint):
        decode_epoch_file(text)


def test_encode_refuses_out_of_order_entries():
    with pytest.raises(EpochFileError, match="does not follow"):
        encode_epoch_file([EpochEntry(2, 0), EpochEntry(2, 10)])


def test_append_requires_a_newer_epoch_and_no_step_back():
    cache = EpochCache()
    assert cache.last_epoch == -1 and cache.last_entry(0) is None
    cache.append(1, 0)
    cache.append(2, 100)
    cache.append(3, 100)  # a term that wrote nothing: allowed (RocketMQ refuses it)
    with pytest.raises(EpochFileError, match="not newer"):
        cache.append(3, 200)
    with pytest.raises(EpochFileError, match="before epoch 3"):
        cache.append(4, 99)
    assert cache.last_epoch == 3
    assert cache.entries(250) == [EpochEntry(1, 0, 100), EpochEntry(2, 100, 100), EpochEntry(3, 100, 250)]
    assert cache.last_entry(250) == EpochEntry(3, 100, 250)
    assert cache.find_epoch_entry_by_offset(99, 250) == EpochEntry(1, 0, 100)
    assert cache.find_epoch_entry_by_offset(100, 250) == EpochEntry(3, 100, 250)
    assert cache.find_epoch_entry_by_offset(250, 250) is None


def master(*starts, max_offset):
    return EpochCache(EpochEntry(e, s) for e, s in starts).entries(max_offset)


def test_consistent_point_same_history_is_the_shorter_log():
    slave = EpochCache([EpochEntry(1, 0), EpochEntry(2, 100)])
    assert slave.find_consistent_point(master((1, 0), (2, 100), max_offset=500), 300) == 300
    assert slave.find_consistent_point(master((1, 0), (2, 100), max_offset=200), 300) == 200


def test_consistent_point_slave_ahead_in_an_old_epoch():
    # The slave received epoch 1 bytes up to 300; the new master was elected at 200 and
    # never had the bytes after it.
    slave = EpochCache([EpochEntry(1, 0)])
    assert slave.find_consistent_point(master((1, 0), (2, 200), max_offset=500), 300) == 200


def test_consistent_point_skips_an_epoch_the_master_never_had():
    slave = EpochCache([EpochEntry(1, 0), EpochEntry(2, 200)])  # a zombie master's own term
    assert slave.find_consistent_point(master((1, 0), (3, 250), max_offset=600), 400) == 200


def test_consistent_point_skips_an_epoch_started_elsewhere():
    slave = EpochCache([EpochEntry(1, 0), EpochEntry(2, 150)])
    assert slave.find_consistent_point(master((1, 0), (2, 180), max_offset=600), 400) == 150


def test_consistent_point_without_common_epoch_is_minus_one():
    assert EpochCache().find_consistent_point(master((1, 0), max_offset=10), 0) == -1
    assert EpochCache([EpochEntry(1, 0)]).find_consistent_point([], 10) == -1
    assert EpochCache([EpochEntry(1, 0)]).find_consistent_point(master((2, 0), max_offset=10), 10) == -1


def test_truncate_suffix_by_offset_drops_epochs_starting_at_or_after_it():
    cache = EpochCache([EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 200)])
    assert cache.truncate_suffix_by_offset(200) == [EpochEntry(3, 200)]
    assert cache.entries(150) == [EpochEntry(1, 0, 100), EpochEntry(2, 100, 150)]
    assert cache.truncate_suffix_by_offset(50) == [EpochEntry(2, 100)]
    assert cache.truncate_suffix_by_offset(0) == [EpochEntry(1, 0)]
    assert len(cache) == 0 and cache.last_epoch == -1


def test_truncate_prefix_by_offset_drops_ended_epochs_and_moves_the_first_start():
    cache = EpochCache([EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 100), EpochEntry(4, 300)])
    assert cache.truncate_prefix_by_offset(100) == [EpochEntry(1, 0), EpochEntry(2, 100)]
    assert cache.entries(400) == [EpochEntry(3, 100, 300), EpochEntry(4, 300, 400)]
    assert cache.truncate_prefix_by_offset(150) == []
    assert cache.first_entry() == EpochEntry(3, 150)
    assert cache.truncate_prefix_by_offset(10_000) == [EpochEntry(3, 150)]
    assert cache.entries(20_000) == [EpochEntry(4, 10_000, 20_000)]  # the last epoch stays
