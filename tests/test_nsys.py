"""The nsys normalizer on the real H200 small-CNN capture, and on an older export layout."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from pipeline.schema import TABLES
from tests.conftest import SMALLCNN, gunzip_to, q

TID = "h200_smallcnn.nsys"


def test_counts_match_the_capture(nsys_out: Path) -> None:
    assert q(nsys_out, "SELECT count(*) FROM kernels") == [(33,)]
    assert q(nsys_out, "SELECT count(*) FROM nvtx_ranges WHERE kind = 'push_pop'") == [(25,)]
    assert q(
        nsys_out,
        "SELECT name, sm_count, compute_major, compute_minor, max_threads_per_sm, max_blocks_per_sm FROM devices",
    ) == [("NVIDIA H200", 132, 9, 0, 2048, 32)]


def test_total_kernel_time_equals_plain_sql_on_the_sqlite(nsys_out: Path, nsys_sqlite: Path) -> None:
    raw = sqlite3.connect(nsys_sqlite)
    expected = raw.execute(
        'SELECT sum("end" - start), min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL'
    ).fetchone()
    assert q(nsys_out, "SELECT sum(duration_ns), min(start_ns), max(end_ns) FROM kernels") == [expected]


def test_kernel_row_resolves_names_and_launching_thread(nsys_out: Path, nsys_sqlite: Path) -> None:
    raw = sqlite3.connect(nsys_sqlite)
    # Independent: the runtime call with the same correlation id, its globalTid decoded by hand.
    (gtid,) = raw.execute(
        "SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
        "USING (correlationId) WHERE k.correlationId = 2274"
    ).fetchone()
    row = q(
        nsys_out,
        "SELECT short_name, grid_x, grid_y, block_x, block_y, registers_per_thread, static_smem_bytes, "
        "launch_type, pid, tid, stream_id FROM kernels WHERE correlation_id = 2274",
    )
    assert row == [
        ("implicit_convolve_sgemm", 1024, 1, 8, 8, 64, 2304, "Regular", (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF, 7)
    ]
    names = q(nsys_out, "SELECT name FROM kernels WHERE correlation_id = 2274")[0][0]
    assert names.startswith("void implicit_convolve_sgemm<float, float, (int)1024, (int)5")


def test_nvtx_nesting_depth_and_parent(nsys_out: Path) -> None:
    rows = q(
        nsys_out,
        "SELECT r.text, r.depth, p.text FROM nvtx_ranges r LEFT JOIN nvtx_ranges p "
        "ON p.range_id = r.parent_id ORDER BY r.start_ns",
    )
    assert rows[18] == ("step", 0, None)
    assert rows[19:] == [(t, 1, "step") for t in ("conv1", "relu", "conv2", "relu", "pool", "fc")]
    assert {r[1] for r in rows[:18]} == {0}


def test_every_table_matches_the_schema(nsys_out: Path) -> None:
    for table in ("kernels", "api_calls", "nvtx_ranges", "memcpy", "memset", "devices", "trace_meta"):
        files = list(nsys_out.glob(f"{table}/trace_id={TID}/*.parquet"))
        assert len(files) == 1, table
        assert pq.read_schema(files[0]).remove_metadata() == TABLES[table], table


def test_memcpy_and_meta(nsys_out: Path) -> None:
    assert q(nsys_out, "SELECT count(*), sum(bytes) FILTER (kind = 'Host-to-Device') FROM memcpy")[0][0] == 6
    (fmt, version, epoch) = q(nsys_out, "SELECT source_format, source_version, epoch_offset_ns FROM trace_meta")[0]
    assert fmt == "nsys-sqlite" and version.startswith("nsys 2025.3.2") and epoch == 1796214899219449629


def older_layout(src: Path, dest: Path) -> Path:
    """Rewrite the 2025.3 export the way pre-2022 nsys wrote it.

    What older exports lacked or stored differently (nsys 2020.x/2021.x exporter
    schemas): kernel names were inline text rather than StringIds ids; NVTX text was
    only in ``textId``; there was no ``endGlobalTid``, ``domainId``, ``graphNodeId``,
    ``greenContextId``, ``sharedMemoryLimitConfig`` or ``launchType``; the GPU table had
    no per-SM warp/block limits; and the CUDA enums were not exported.
    """
    shutil.copy(src, dest)
    db = sqlite3.connect(dest)
    db.executescript("""
        CREATE TABLE k_old AS SELECT k.start, k."end", k.deviceId, k.contextId, k.streamId, k.correlationId,
            k.globalPid, d.value AS demangledName, s.value AS shortName, k.registersPerThread,
            k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k.staticSharedMemory,
            k.dynamicSharedMemory, k.localMemoryPerThread
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName
        JOIN StringIds s ON s.id = k.shortName;
        DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;
        ALTER TABLE k_old RENAME TO CUPTI_ACTIVITY_KIND_KERNEL;
        INSERT INTO StringIds (id, value) SELECT 900000 + rowid, text FROM NVTX_EVENTS WHERE text IS NOT NULL;
        CREATE TABLE n_old AS SELECT start, "end", eventType, globalTid, 900000 + rowid AS textId
        FROM NVTX_EVENTS;
        DROP TABLE NVTX_EVENTS;
        ALTER TABLE n_old RENAME TO NVTX_EVENTS;
        ALTER TABLE TARGET_INFO_GPU DROP COLUMN maxBlocksPerSm;
        ALTER TABLE TARGET_INFO_GPU DROP COLUMN maxWarpsPerSm;
        DROP TABLE ENUM_CUDA_KERNEL_LAUNCH_TYPE;
        DROP TABLE ENUM_CUDA_MEM_KIND;
    """)
    db.commit()
    db.close()
    return dest


def test_older_layout_gives_the_same_kernels_and_ranges(nsys_out: Path, nsys_sqlite: Path, tmp_path: Path) -> None:
    old = older_layout(nsys_sqlite, tmp_path / "old.sqlite")
    out = tmp_path / "out"
    normalize_file(old, out, trace_id=TID)
    cols = "kernel_id, name, short_name, start_ns, end_ns, grid_x, block_x, registers_per_thread, pid, tid"
    assert q(out, f"SELECT {cols} FROM kernels ORDER BY 1") == q(nsys_out, f"SELECT {cols} FROM kernels ORDER BY 1")
    rcols = "range_id, text, start_ns, end_ns, depth, parent_id, tid"
    assert q(out, f"SELECT {rcols} FROM nvtx_ranges ORDER BY 1") == q(
        nsys_out, f"SELECT {rcols} FROM nvtx_ranges ORDER BY 1"
    )
    # What the old layout cannot say comes out null, never invented.
    assert q(out, "SELECT max_blocks_per_sm, max_threads_per_sm, sm_count FROM devices") == [(None, None, 132)]
    assert q(out, "SELECT DISTINCT launch_type, graph_node_id FROM kernels") == [(None, None)]


def test_truncated_sqlite_is_rejected_and_keeps_earlier_output(nsys_sqlite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    good = tmp_path / "run" / "nsys.sqlite"
    good.parent.mkdir()
    shutil.copy(nsys_sqlite, good)
    normalize_file(good, out)
    before = {p: p.read_bytes() for p in out.rglob("*.parquet")}
    data = good.read_bytes()
    good.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match="truncated"):
        normalize_file(good, out)
    assert {p: p.read_bytes() for p in out.rglob("*.parquet")} == before
    assert len(list((out / ".tracepipe" / "traces").glob("*/*"))) == 1  # the committed one; the aborted is gone


def test_non_sqlite_with_sqlite_name(tmp_path: Path) -> None:
    bad = tmp_path / "nsys.sqlite"
    bad.write_bytes(b"this is not a database\n" * 10)
    with pytest.raises(BadInputError, match="named like an SQLite database but its content is none"):
        normalize_file(bad, tmp_path / "out")


def test_sqlite_of_another_program_is_no_export(tmp_path: Path) -> None:
    # A database with none of nsys's tables is refused, not read as a capture without kernels
    # (tests/test_external_traces.py has a real export without kernels, which normalizes).
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    db.execute('CREATE TABLE KERNELS (start INTEGER, "end" INTEGER)')
    db.commit()
    db.close()
    with pytest.raises(BadInputError, match="an SQLite database but no Nsight Systems export"):
        normalize_file(path, tmp_path / "out")
    assert not (tmp_path / "out" / "kernels").exists()


@pytest.mark.parametrize("suffix", [".nsys-rep", ".qdrep"])
def test_nsys_rep_without_nsys_says_how_to_convert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    import pipeline.normalize.nsys as nsys

    monkeypatch.setattr(nsys, "find_nsys", lambda: None)
    rep = tmp_path / f"run{suffix}"
    rep.write_bytes((SMALLCNN / "nsys.sqlite.gz").read_bytes()[:100])  # content is nsys's business, not ours
    # (a .qdrep, nsys's name before 2021.4, was called a .nsys-rep)
    with pytest.raises(BadInputError, match=f"a \\{suffix} report needs the nsys CLI"):
        normalize_file(rep, tmp_path / "out")


def test_nsys_rep_is_exported_with_the_nsys_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_sqlite: Path
) -> None:
    """A stand-in `nsys` on PATH that does what `nsys export --type sqlite -o OUT REP` does (writes the sqlite)."""
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\necho "$@" > {tmp_path}/args\nwhile [ "$1" != "-o" ]; do shift; done\ncp {nsys_sqlite} "$2"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    rep = SMALLCNN.parent / "h200_resnet18" / "nsys.nsys-rep"
    result = normalize_file(rep, tmp_path / "out", trace_id="rep")
    assert result.rows["kernels"] == 33 and result.source_format == "nsys-rep"
    args = (tmp_path / "args").read_text().split()
    assert args[:3] == ["export", "--type", "sqlite"] and args[-1] == str(rep)


def test_failed_nsys_export_names_the_missing_importer_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'QdstrmImporter: error while loading shared libraries: libdw.so.1' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    with pytest.raises(BadInputError, match=r"libdw\.so\.1"):
        normalize_file(SMALLCNN.parent / "h200_resnet18" / "nsys.nsys-rep", tmp_path / "out")


def test_a_domain_first_met_past_a_thousand_ranges_is_read(tmp_path: Path) -> None:
    # A real emit_nvtx training export (MIT, bolongcheng/assignment2-systems: 13,915 default-domain ranges, then a
    # CUB sort's range in domain CCCL) stopped normalize with "Type mismatch in column 3: expected INT64 but got
    # STRING" (exit 1): ADBC typed the domain column from its first 1,024 rows, all NULL. The small CNN's export
    # made into one: 1,100 one-ns ranges before its own, and a CCCL range after them.
    db = sqlite3.connect(gunzip_to(SMALLCNN / "nsys.sqlite.gz", tmp_path / "t.sqlite"))
    tid, first, last = db.execute(
        'SELECT globalTid, min(start), max("end") FROM NVTX_EVENTS WHERE eventType = 59'
    ).fetchone()
    db.executemany(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, 0)',
        [(first - 3000 + 2 * i, first - 3000 + 2 * i + 1, f"r{i}", tid) for i in range(1100)],
    )
    insert = 'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, 9)'
    db.execute(insert, (first - 4000, None, 75, "CCCL", tid))  # the domain's creation
    db.execute(insert, (last + 10, last + 20, 59, "cub::DeviceRadixSort::SortKeys", tid))
    db.commit()
    db.close()
    normalize_file(tmp_path / "t.sqlite", tmp_path / "out")
    got = q(tmp_path / "out", "SELECT domain, count(*) FROM nvtx_ranges GROUP BY ALL ORDER BY ALL")
    assert got == [("CCCL", 1), (None, 1100 + 25)]
