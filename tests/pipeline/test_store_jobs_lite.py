"""Lite topics (RocketMQ 5.5) in the store-file source and the offline jobs (Spark): the
commitlog source's liteTopic / liteQueueOffset, stats per parent, the audit's lite offset check
(clean, including a lite topic that expired and started again, then planted duplicates, gaps and
a restart too soon), and rebuild removing the lite index so the store rebuilds it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.jobs.audit import LITE_RESTART_IDLE_MS_MIN
from services.domain.format.commitlog_format import BLANK, PROP_CRC_PREFIX, decode_record, fill_prop_crc
from services.domain.format.properties_format import INNER_MULTI_QUEUE_OFFSET
from services.domain.lite import LITE_TOPIC, LMQ_OFFSET_DIGITS, lmq_name
from services.runtime.clock import ManualClock
from services.store.lite.lifecycle import LITE_EXPIRATION_FLOOR_MS
from services.store.metadata.config_files import TopicConfig
from services.store.store import FileStore
from tests.support.filestore import message, small_config

pytestmark = pytest.mark.spark

SIZES = dict(commitlog_file_size_bytes=8 * 1024, consume_queue_units_per_file=50)
PARENT, SHORT = "LiteOrders", "LiteShort"  # SHORT's lite topics expire after 15 minutes idle
CHATS = {f"chat-{i}": 3 * i + 1 for i in range(5)}  # lite topic -> messages: 1, 4, 7, 10, 13


def lite_parent(store: FileStore, name: str, expiration_minutes: int | None = None) -> None:
    config = TopicConfig(topic_name=name, read_queue_nums=2, write_queue_nums=2)
    config.message_type = "LITE"
    if expiration_minutes is not None:
        config.attributes["lite.topic.expiration"] = str(expiration_minutes)
    store.topics.create_or_update(config)


def put(store: FileStore, *records) -> None:
    assert all(r.status.name == "PUT_OK" for r in store.put_messages(list(records)))
    store.reput.run_once()


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    """A stopped store: PARENT's five lite topics interleaved with plain messages over several
    segments, and SHORT's lite topic "gone" (3 messages) that expires, then gets 2 more, which
    the store numbers from 0 again."""
    root = tmp_path_factory.mktemp("lite") / "store"
    clock = ManualClock()
    store = FileStore(small_config(root, **SIZES), clock)
    store.start()
    try:
        lite_parent(store, PARENT)
        lite_parent(store, SHORT, expiration_minutes=15)
        for i in range(max(CHATS.values())):
            batch = [
                message(PARENT, n % 2, b"%s-%d" % (lite.encode(), i) * 20, **{LITE_TOPIC: lite})
                for n, (lite, count) in enumerate(CHATS.items())
                if i < count
            ]
            batch += [message("Plain", i % 2, b"plain-%d" % i * 30, tags="TagA")]
            if i < 3:
                batch.append(message(SHORT, 0, b"gone-%d" % i, **{LITE_TOPIC: "gone"}))
            put(store, *batch)
            clock.advance_ms(1000)
        clock.advance_ms(16 * 60_000)
        assert store.lite_lifecycle.run_once() == 1  # "gone" (PARENT's never expire)
        put(store, *(message(SHORT, 0, b"gone-again-%d" % i, **{LITE_TOPIC: "gone"}) for i in range(2)))
    finally:
        store.shutdown()
    return root


def reference_records(root: Path) -> list:
    records = []
    for segment in sorted((root / "commitlog").iterdir()):
        data, base, pos = segment.read_bytes(), int(segment.name), 0
        while pos < len(data) - 8:
            try:
                record = decode_record(data, pos, len(data), base_offset=base)
            except Exception:  # noqa: BLE001 - the zeros after the last record
                break
            if record is BLANK:
                break
            records.append(record)
            pos += record.total_size
    return records


def test_commitlog_source_has_the_lite_columns(spark, store_root):
    expected = {r.phy_offset: r for r in reference_records(store_root)}
    rows = (
        spark.read.format("rocketmq-commitlog")
        .load(str(store_root))
        .select("commitLogOffset", "topic", "liteTopic", "liteQueueOffset")
        .collect()
    )
    assert len(rows) == len(expected)
    offsets: dict[tuple[str, str], list[int]] = {}
    for row in sorted(rows, key=lambda r: r["commitLogOffset"]):
        props = expected[row["commitLogOffset"]].properties
        assert row["liteTopic"] == props.get(LITE_TOPIC)
        lite_offset = props.get(INNER_MULTI_QUEUE_OFFSET)
        assert row["liteQueueOffset"] == (None if lite_offset is None else int(lite_offset))
        if row["liteTopic"] is not None:
            offsets.setdefault((row["topic"], row["liteTopic"]), []).append(row["liteQueueOffset"])
    assert {lite: offsets[(PARENT, lite)] for lite in CHATS} == {lite: list(range(n)) for lite, n in CHATS.items()}
    assert offsets[(SHORT, "gone")] == [0, 1, 2, 0, 1]  # expired, then made anew from 0


def test_stats_per_parent_and_lite_out(spark, store_root, tmp_path, capsys):
    from pipeline.jobs import stats

    result = stats.run(spark, str(store_root), window="1 minute", lite_top=2, lite_out=str(tmp_path / "lite"))
    by_parent = {t.topic: t for t in result.lite}
    assert set(by_parent) == {PARENT, SHORT}
    parent = by_parent[PARENT]
    assert (parent.lite_topics, parent.records) == (5, sum(CHATS.values())) and parent.bytes > 0
    assert parent.top == [("chat-4", 13), ("chat-3", 10)]
    assert (by_parent[SHORT].lite_topics, by_parent[SHORT].records, by_parent[SHORT].top) == (1, 5, [("gone", 5)])
    by_topic = {t.topic: t.records for t in result.topics}
    assert by_topic[PARENT] == sum(CHATS.values()) and by_topic["Plain"] == 13
    written = {(r["topic"], r["liteTopic"]): r["records"] for r in spark.read.parquet(str(tmp_path / "lite")).collect()}
    assert written == {**{(PARENT, lite): n for lite, n in CHATS.items()}, (SHORT, "gone"): 5}
    assert stats.main([str(store_root), "--lite-top", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Lite topics per parent" in out and "chat-4 (13), chat-3 (10)" in out


def test_audit_checks_lite_offsets(spark, store_root, tmp_path, capsys):
    from pipeline.jobs import audit

    assert LITE_RESTART_IDLE_MS_MIN == LITE_EXPIRATION_FLOOR_MS
    clean = audit.run(spark, str(store_root))
    assert clean.ok, clean
    assert (clean.lite_records, clean.lite_topics) == (sum(CHATS.values()) + 5, 6)
    copy = tmp_path / "store"
    shutil.copytree(store_root, copy)
    # chat-3: offset 3 rewritten as 2 (a duplicate, then a gap); chat-4: offset 6 rewritten as 0
    # one second after offset 5 (a restart the store makes only after 15 idle minutes); chat-0's
    # one message numbered 5.
    planted = {("chat-3", 3): 2, ("chat-4", 6): 0, ("chat-0", 0): 5}
    for record in reference_records(copy):
        key = (record.properties.get(LITE_TOPIC), int(record.properties.get(INNER_MULTI_QUEUE_OFFSET, -1)))
        if record.topic == PARENT and key in planted:
            rewrite_lite_offset(copy, record.phy_offset, record.total_size, planted[key])
    damaged = audit.run(spark, str(copy))
    assert not damaged.ok and damaged.counts == {"crc": 0, "units": 0, "dispatch": 0, "lite": 5}
    found = {(lmq, offset): why for _, lmq, offset, _, why in damaged.lite_mismatches}
    assert found == {
        (lmq_name(PARENT, "chat-3"), 2): "duplicate: 2 after 2",
        (lmq_name(PARENT, "chat-3"), 4): "gap: 4 after 2",
        (lmq_name(PARENT, "chat-4"), 0): "restart at 0 after 5 only 1000 ms later (< 15 min idle)",
        (lmq_name(PARENT, "chat-4"), 7): "gap: 7 after 0",
        (lmq_name(PARENT, "chat-0"), 5): "first offset 5, not 0",
    }
    assert audit.main([str(copy), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "Lite offsets out of sequence" in out and "chat-3" in out and "duplicate" in out
    # After retention removed the first segment, lite topics may start past 0.
    trimmed = tmp_path / "trimmed"
    shutil.copytree(store_root, trimmed)
    segments = sorted((trimmed / "commitlog").iterdir())
    assert len(segments) >= 3
    segments[0].unlink()
    after_retention = audit.run(spark, str(trimmed))
    assert after_retention.ok, after_retention
    assert 0 < after_retention.lite_records < clean.lite_records
    firsts = (
        spark.read.format("rocketmq-commitlog")
        .load(str(trimmed))
        .groupBy("topic", "liteTopic")
        .agg({"liteQueueOffset": "min"})
        .collect()
    )
    assert any(row[2] for row in firsts if row[1] is not None)  # some lite topic now starts past 0


def rewrite_lite_offset(root: Path, phy_offset: int, total_size: int, offset: int) -> None:
    """Overwrite a record's INNER_MULTI_QUEUE_OFFSET digits, and its whole-record CRC to match."""
    segment = max((p for p in (root / "commitlog").iterdir() if int(p.name) <= phy_offset), key=lambda p: p.name)
    data = bytearray(segment.read_bytes())
    pos = phy_offset - int(segment.name)
    name = INNER_MULTI_QUEUE_OFFSET.encode() + b"\x01"
    at = data.index(name, pos, pos + total_size) + len(name)
    data[at : at + LMQ_OFFSET_DIGITS] = b"%0*d" % (LMQ_OFFSET_DIGITS, offset)
    if data[pos + total_size - 20 : pos + total_size - 11].startswith(PROP_CRC_PREFIX):
        fill_prop_crc(data, pos, total_size)
    segment.write_bytes(bytes(data))


def test_rebuild_removes_the_lite_index_and_the_store_rebuilds_it(spark, store_root, tmp_path):
    from pipeline.jobs import rebuild

    copy = tmp_path / "store"
    shutil.copytree(store_root, copy)
    elsewhere = rebuild.run(spark, str(copy), output=str(tmp_path / "out"), units_per_file=50)
    assert elsewhere.lite_index_removed == () and (copy / "lite" / "data.mdb").exists()
    summary = rebuild.run(spark, str(copy), force=True, units_per_file=50)
    assert summary.lite_index_removed == (str(copy / "lite"),) and not (copy / "lite").exists()
    units = {}
    for root in (store_root, copy):
        store = FileStore(small_config(root, **SIZES), ManualClock())
        store.start()
        try:
            units[root] = {
                lite: [(u.queue_offset, u.phy_offset) for u in store.lite.units(lmq_name(PARENT, lite), 0, 100)]
                for lite in CHATS
            }
        finally:
            store.shutdown()
    assert units[copy] == units[store_root] and len(units[copy]["chat-4"]) == 13
