"""The store-file sources and the jobs over several store roots at once, one per broker group
(issue 17): each root's rows carry its brokerName, and nothing of one root is matched against
the other's, although both CommitLogs start at phy offset 0 and share topic names."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from pipeline.errors import OptionError
from services.domain.format.consume_queue_format import CQ_UNIT
from services.runtime.clock import SystemClock
from services.store.store import FileStore
from tests.support.filestore import message, small_config

pytestmark = pytest.mark.spark

SIZES = dict(
    commitlog_file_size_bytes=64 * 1024, consume_queue_units_per_file=100, index_hash_slot_num=97, index_num_max=400
)
# broker-a holds Orders and Logs, broker-b Orders and Payments: 300 and 200 records.
CONTENT = {"broker-a": (("Orders", "Logs"), 300), "broker-b": (("Orders", "Payments"), 200)}
NAMES = "broker-a,broker-b"


def write_store(root: Path, name: str) -> None:
    topics, count = CONTENT[name]
    store = FileStore(small_config(root, **SIZES), SystemClock())
    store.start()
    try:
        batch = [
            message(
                topic=topics[i % 2],
                queue_id=i % 4,
                body=b"%s-%d" % (name.encode(), i) * (1 + i % 7),
                tags=("TagA", "TagB")[i % 2],
                keys=f"{name}-key-{i} shared" if i % 3 == 0 else None,
                UNIQ_KEY=f"{name}-U{i:05d}",
            )
            for i in range(count)
        ]
        batch[0].sys_flag = 0x4  # a half message: never dispatched
        assert all(r.status.name == "PUT_OK" for r in store.put_messages(batch))
        store.reput.run_once()
    finally:
        store.shutdown()


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("groups")
    a, b = base / "store", base / "broker-b" / "store"  # pyrmq up --groups 2's layout
    write_store(a, "broker-a")
    write_store(b, "broker-b")
    return a, b


def load(spark, fmt: str, roots, names: str | None = NAMES):
    reader = spark.read.format(fmt)
    if names:
        reader = reader.option("brokerNames", names)
    return reader.load([str(r) for r in roots])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sources_read_every_root_under_its_broker_name(spark, roots):
    records = load(spark, "rocketmq-commitlog", roots)
    per = {(r["brokerName"], r["topic"]): r["count"] for r in records.groupBy("brokerName", "topic").count().collect()}
    assert per == {
        ("broker-a", "Orders"): 150,
        ("broker-a", "Logs"): 150,
        ("broker-b", "Orders"): 100,
        ("broker-b", "Payments"): 100,
    }
    # Both CommitLogs start at 0: phy offsets repeat across roots, (brokerName, phy) does not.
    assert records.select("commitLogOffset").distinct().count() < 500
    assert records.select("brokerName", "commitLogOffset").distinct().count() == 500
    first = {r["brokerName"]: r["uniqKey"] for r in records.where("commitLogOffset = 0").collect()}
    assert first == {"broker-a": "broker-a-U00000", "broker-b": "broker-b-U00000"}
    units = load(spark, "rocketmq-consumequeue", roots)
    assert units.columns[:3] == ["topic", "brokerName", "queueId"]
    counted = {
        (r["brokerName"], r["topic"]): r["count"] for r in units.groupBy("brokerName", "topic").count().collect()
    }
    assert counted == {
        ("broker-a", "Orders"): 149,
        ("broker-a", "Logs"): 150,
        ("broker-b", "Orders"): 99,
        ("broker-b", "Payments"): 100,
    }
    one = spark.read.format("rocketmq-commitlog").load(str(roots[0]))
    assert one.where("brokerName IS NULL").count() == 300  # one unnamed root: as before groups
    with pytest.raises(Exception, match="'brokerNames' is required with 2 store roots"):
        load(spark, "rocketmq-commitlog", roots, names=None).count()


def test_export_and_stats_over_two_roots(spark, roots, tmp_path, capsys):
    from pipeline.jobs import export, stats
    from pipeline.jobs.stores import as_roots

    both = as_roots([str(r) for r in roots], NAMES)
    summary = export.run(spark, both, str(tmp_path / "out"), topics=("Orders",))
    assert [(t, n) for t, n, _ in summary.per_topic] == [("Orders", 248)]  # each root's half message left out
    assert [(b, n) for b, n, _ in summary.per_broker] == [("broker-a", 149), ("broker-b", 99)]
    exported = spark.read.parquet(str(tmp_path / "out"))
    assert {r["brokerName"]: r["count"] for r in exported.groupBy("brokerName").count().collect()} == {
        "broker-a": 149,
        "broker-b": 99,
    }
    result = stats.run(spark, both, window="1 minute")
    assert {t.topic: t.records for t in result.topics} == {"Orders": 250, "Logs": 150, "Payments": 100}
    assert [(b, n) for b, n, _ in result.per_broker] == [("broker-a", 300), ("broker-b", 200)]
    # The command line, as a user runs it (python -m pipeline.jobs stats ROOT ROOT --broker-names ...).
    assert stats.main([*map(str, roots), "--broker-names", NAMES, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "Per broker" in printed and "broker-b" in printed and "500 records, 3 topics" in printed
    with pytest.raises(SystemExit):  # the CLI refuses unnamed roots before starting Spark
        export.main([str(roots[0]), str(roots[1]), str(tmp_path / "cli")])
    with pytest.raises(OptionError, match="repeats a name"):
        as_roots([str(r) for r in roots], "broker-a,broker-a")


def test_audit_and_rebuild_keep_each_root_to_itself(spark, roots, tmp_path, capsys):
    from pipeline.jobs import audit, rebuild

    names = ("broker-a", "broker-b")
    clean = audit.run(spark, tuple(zip(names, map(str, roots))))
    assert clean.ok, clean
    assert clean.records == 500 and clean.units == 498
    copies = [tmp_path / "a" / "store", tmp_path / "b" / "store"]
    for root, copy in zip(roots, copies):
        shutil.copytree(root, copy)
        shutil.rmtree(copy / "consumequeue")
        shutil.rmtree(copy / "index")
    built = rebuild.run(
        spark,
        tuple(zip(names, map(str, copies))),
        units_per_file=SIZES["consume_queue_units_per_file"],
        hash_slot_num=SIZES["index_hash_slot_num"],
        index_num_max=SIZES["index_num_max"],
    )
    assert built.units == 498 and built.index_files >= 2
    # Each root's lite index (empty here) is removed: its store rebuilds it from its own CommitLog.
    assert built.lite_index_removed == tuple(str(copy / "lite") for copy in copies)
    for root, copy in zip(roots, copies):
        cq = [
            sorted(p.relative_to(base) for p in (base / "consumequeue").rglob("*") if p.is_file())
            for base in (root, copy)
        ]
        assert cq[0] == cq[1] and len(cq[0]) == 4  # 2 topics x 2 queues each
        for rel in cq[0]:
            assert sha256(copy / rel) == sha256(root / rel), rel
        index = [sorted((base / "index").iterdir()) for base in (root, copy)]
        assert len(index[0]) == len(index[1]) >= 1
        assert [sha256(p) for p in index[0]] == [sha256(p) for p in index[1]]
    # Damage broker-b's copy only: every failure names broker-b.
    queue_file = copies[1] / "consumequeue" / "Payments" / "1" / f"{0:020d}"
    data = bytearray(queue_file.read_bytes())
    phy, size, tags = CQ_UNIT.unpack_from(data, 2 * 20)
    CQ_UNIT.pack_into(data, 2 * 20, phy, size + 1, tags)
    queue_file.write_bytes(bytes(data))
    damaged = audit.run(spark, tuple(zip(names, map(str, copies))))
    assert audit.main([*map(str, copies), "--broker-names", NAMES, "--no-progress"]) == 1
    assert "broker-b" in capsys.readouterr().out
    assert not damaged.ok and damaged.counts == {"crc": 0, "units": 1, "dispatch": 0, "lite": 0}
    assert [(m[0], m[1], m[2], m[3]) for m in damaged.unit_mismatches] == [("broker-b", "Payments", 1, 2)]
