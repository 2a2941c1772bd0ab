"""The store-file sources and the offline jobs over files the store service wrote (Spark)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from services.domain.format.commitlog_format import BLANK, decode_record, host_to_string, tags_code
from services.domain.format.consume_queue_format import CQ_UNIT
from services.runtime.clock import SystemClock
from services.store.index.service import IndexService
from services.store.store import FileStore
from tests.support.filestore import message, small_config

pytestmark = pytest.mark.spark

SIZES = dict(
    commitlog_file_size_bytes=128 * 1024, consume_queue_units_per_file=500, index_hash_slot_num=97, index_num_max=700
)
TOPICS = ("Orders", "Payments", "Logs")


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    """A stopped store: 3 topics x 4 queues, keys and tags, several CommitLog segments,
    ConsumeQueue files and IndexFiles, transaction half/rolled-back records, a delayed one."""
    root = tmp_path_factory.mktemp("store") / "store"
    store = FileStore(small_config(root, **SIZES), SystemClock())
    store.start()
    try:
        for round_no in range(6):
            batch = [
                message(
                    topic=TOPICS[i % 3],
                    queue_id=i % 4,
                    body=b"body-%d-%d" % (round_no, i) * (1 + i % 5),
                    tags=("TagA", "TagB", None)[i % 3],
                    keys=f"order-{round_no}-{i} shared" if i % 2 else None,
                    UNIQ_KEY=f"U{round_no:02d}{i:04d}",
                    color="red",
                )
                for i in range(400)
            ]
            for i, record in enumerate(batch[:6]):
                record.sys_flag = (0x4, 0xC, 0x8)[i % 3]  # half, rolled back, committed
            assert all(r.status.name == "PUT_OK" for r in store.put_messages(batch))
        delayed = message(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, DELAY="3", tags="TagD")
        assert store.put_messages([delayed], allow_system_topics=True)[0].status.name == "PUT_OK"
        store.reput.run_once()
    finally:
        store.shutdown()
    return root


def reference_records(root: Path) -> list:
    records = []
    for segment in sorted((root / "commitlog").iterdir()):
        data = segment.read_bytes()
        base, pos = int(segment.name), 0
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


def test_commitlog_source_equals_the_reference_decoder(spark, store_root):
    expected = reference_records(store_root)
    df = spark.read.format("rocketmq-commitlog").option("verifyCrc", "true").load(str(store_root))
    rows = df.orderBy("commitLogOffset").collect()
    assert len(rows) == len(expected) == 6 * 400 + 1
    assert len({r["segment"] for r in rows}) >= 3
    for row, ref in zip(rows, expected):
        assert (row["commitLogOffset"], row["totalSize"], row["topic"], row["queueId"], row["queueOffset"]) == (
            ref.phy_offset,
            ref.total_size,
            ref.topic,
            ref.queue_id,
            ref.queue_offset,
        )
        assert row["body"] == ref.body and dict(row["properties"]) == ref.properties
        assert row["keys"] == ref.keys and row["tags"] == ref.tags and row["uniqKey"] == ref.uniq_key
        assert row["storeHost"] == host_to_string(ref.store_host) and row["sysFlag"] == ref.sys_flag
        assert row["tagsCode"] == tags_code(ref, small_config(store_root).delay_level_millis)
        assert row["crcValid"] is True
    # Records are back to back inside a segment: offset + size is the next record's offset.
    for a, b in zip(rows, rows[1:]):
        if a["segment"] == b["segment"]:
            assert a["commitLogOffset"] + a["totalSize"] == b["commitLogOffset"]
    # Splits at arbitrary byte offsets give every record exactly once.
    split = spark.read.format("rocketmq-commitlog").option("splitSize", 10_000).load(str(store_root))
    assert split.rdd.getNumPartitions() > 20
    offsets = [r[0] for r in split.select("commitLogOffset").collect()]
    assert sorted(offsets) == [r.phy_offset for r in expected]
    # A user schema selects (and decodes only) those columns; a wrong one is a clear error.
    narrow = (
        spark.read.format("rocketmq-commitlog").schema("commitLogOffset bigint, topic string").load(str(store_root))
    )
    assert narrow.columns == ["commitLogOffset", "topic"] and narrow.count() == len(expected)
    with pytest.raises(Exception, match="unknown column 'nope'"):
        spark.read.format("rocketmq-commitlog").schema("nope int").load(str(store_root)).count()


def test_consumequeue_source(spark, store_root):
    df = spark.read.format("rocketmq-consumequeue").load(str(store_root))
    counts = {(r["topic"], r["queueId"]): r["count"] for r in df.groupBy("topic", "queueId").count().collect()}
    # i % 12 == 0 lands in Orders/0; record 0 of each round is a half message (not dispatched)
    assert counts[("Orders", 0)] == sum(1 for i in range(400) if i % 12 == 0) * 6 - 6
    assert counts[("SCHEDULE_TOPIC_XXXX", 2)] == 1
    only = spark.read.format("rocketmq-consumequeue").option("topics", "Logs").load(str(store_root))
    assert {r[0] for r in only.select("topic").distinct().collect()} == {"Logs"}


def test_export_round_trip_and_stats(spark, store_root, tmp_path):
    from pipeline.jobs import export, stats, stores

    summary = export.run(spark, str(store_root), str(tmp_path / "out"), topics=("Orders", "Logs"))
    exported = spark.read.parquet(str(tmp_path / "out"))
    source = stores.dispatchable(
        stores.commitlog_frame(spark, str(store_root), export.EXPORT_COLUMNS, topics=("Orders", "Logs"))
    )
    assert summary.records == source.count() == exported.count() > 0
    assert {t for t, _, _ in summary.per_topic} == {"Orders", "Logs"}
    from pyspark.sql import functions as F

    comparable = lambda df: df.select(*export.EXPORT_COLUMNS).withColumn(  # noqa: E731 - no maps in EXCEPT
        "properties", F.array_sort(F.map_entries("properties"))
    )
    assert comparable(exported).exceptAll(comparable(source)).count() == 0
    result = stats.run(spark, str(store_root), window="1 minute")
    by_topic = {t.topic: t for t in result.topics}
    assert sum(t.records for t in result.topics) == 6 * 400 + 1
    assert by_topic["Orders"].records == 134 * 6 and by_topic["Orders"].bytes > 0
    assert sum(n for _, n, _ in result.windows) == 6 * 400 + 1


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_rebuild_is_byte_identical(spark, store_root, tmp_path):
    from pipeline.jobs import rebuild

    copy = tmp_path / "store"
    shutil.copytree(store_root, copy)
    shutil.rmtree(copy / "consumequeue")
    shutil.rmtree(copy / "index")
    summary = rebuild.run(
        spark,
        str(copy),
        units_per_file=SIZES["consume_queue_units_per_file"],
        hash_slot_num=SIZES["index_hash_slot_num"],
        index_num_max=SIZES["index_num_max"],
    )
    original_cq = sorted(p.relative_to(store_root) for p in (store_root / "consumequeue").rglob("*") if p.is_file())
    rebuilt_cq = sorted(p.relative_to(copy) for p in (copy / "consumequeue").rglob("*") if p.is_file())
    assert rebuilt_cq == original_cq and summary.consume_queue_files == len(original_cq) > 12
    for rel in original_cq:
        assert sha256(copy / rel) == sha256(store_root / rel), rel
    original_index = sorted((store_root / "index").iterdir())
    rebuilt_index = sorted((copy / "index").iterdir())
    assert len(rebuilt_index) == len(original_index) == summary.index_files > 1
    for a, b in zip(original_index, rebuilt_index):
        assert sha256(a) == sha256(b), (a.name, b.name)
    # Queried through the store's own IndexService, the rebuilt files answer the same.
    services = [
        IndexService(root / "index", SIZES["index_hash_slot_num"], SIZES["index_num_max"], SystemClock())
        for root in (store_root, copy)
    ]
    try:
        for service in services:
            service.load(True, 0)
        for topic, key in (("Orders", "shared"), ("Payments", "order-3-7"), ("Logs", "U050011")):
            answers = [sorted(s.query(topic, key, 64, 0, 1 << 62)) for s in services]
            assert answers[0] == answers[1] and answers[0]
    finally:
        for service in services:
            service.close()


def test_audit_passes_then_catches_planted_damage(spark, store_root, tmp_path):
    from pipeline.jobs import audit

    clean = audit.run(spark, str(store_root))
    assert clean.ok, clean
    assert clean.records == 6 * 400 + 1 and clean.units == 6 * 400 + 1 - 4 * 6
    copy = tmp_path / "store"
    shutil.copytree(store_root, copy)
    queue_file = copy / "consumequeue" / "Payments" / "1" / f"{0:020d}"
    data = bytearray(queue_file.read_bytes())
    phy, size, tags = CQ_UNIT.unpack_from(data, 3 * 20)
    CQ_UNIT.pack_into(data, 3 * 20, phy, size + 1, tags)  # unit 3: wrong size
    CQ_UNIT.pack_into(data, 4 * 20, *CQ_UNIT.unpack_from(data, 5 * 20))  # unit 4 duplicates unit 5
    queue_file.write_bytes(bytes(data))
    segment = sorted((copy / "commitlog").iterdir())[1]
    raw = bytearray(segment.read_bytes())
    raw[200] ^= 0x40  # a flipped bit inside some record
    segment.write_bytes(bytes(raw))
    damaged = audit.run(spark, str(copy))
    assert not damaged.ok
    assert damaged.counts["crc"] == 1
    reasons = {why for *_, why in damaged.unit_mismatches}
    assert any(r.startswith("size ") for r in reasons) and any("queue offset" in r for r in reasons)
    assert damaged.counts["dispatch"] >= 2  # unit 4's record lost its unit, unit 5's has two
