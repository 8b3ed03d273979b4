"""Every Nsight Systems export layout normalizes and analyzes with the same, exact numbers.

Each fixture is built here from one real export's ``CREATE TABLE`` list (``sample_traces/nsys_schemas/``,
pre-2022 to schema 3.15; today's from the committed 2025.3 sample and the nsys 2026.2 (schema 3.25) file)
and filled with the same hand-made, consistent rows, inserted only into the columns that layout has.
Expected values are worked out by hand below, never taken from the code under test.

The dumped layouts have no ``NVTX_EVENTS`` table (their captures had no NVTX); the fixture adds today's
definition, with the range text inline for pre-2022 (``text``) and through ``StringIds`` otherwise.
"""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file, nsys
from tests.conftest import SAMPLES, SMALLCNN, q

SCHEMAS = SAMPLES / "nsys_schemas"
TODAY = {
    "2025.3": SMALLCNN / "nsys.sqlite.gz",
    "3.25": SAMPLES / "external" / "nsysai_2026.2_mfu_2gpu_before.sqlite.gz",
}
LAYOUTS = [p.stem.removeprefix("export_schema_") for p in sorted(SCHEMAS.glob("export_schema_*.sql"))] + list(TODAY)

PID, TID = 100, 101
GLOBAL_TID = (PID << 24) | TID
STRINGS = {
    1: "cudaLaunchKernel_v7000",
    2: "void gemm_kernel<float>(float*, int)",
    3: "gemm_kernel",
    4: "void relu_kernel(float*)",
    5: "relu_kernel",
    6: "model",
    7: "conv1",
    8: "relu1",
}
# (correlation id, launch start, kernel start, kernel duration, demangled name id, short name id, launch type)
KERNELS = [
    (1, 1000, 10000, 500, 2, 3, 1),
    (2, 2000, 11000, 700, 2, 3, 1),
    (3, 3000, 12000, 300, 4, 5, 1),
    (4, 4000, 13000, 800, 4, 5, 2),
]
# (text id, start, end): model encloses conv1 (launches 1, 2) and relu1 (launches 3, 4).
RANGES = [(6, 800, 4600), (7, 900, 2500), (8, 2900, 4500)]
NVTX_TODAY = (
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
    "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, "
    "domainId INTEGER)"
)
NVTX_PRE2022 = (
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
    "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER)"
)


def schema_of(layout: str, tmp: Path) -> list[str]:
    """The CREATE TABLE statements of a layout: a dumped file, or a real export of today."""
    if layout not in TODAY:
        return [(SCHEMAS / f"export_schema_{layout}.sql").read_text()]
    raw = tmp / f"raw-{layout}.sqlite"
    raw.write_bytes(gzip.decompress(TODAY[layout].read_bytes()))
    con = sqlite3.connect(raw)
    sqls = [r[0] for r in con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL")]
    con.close()
    return sqls


class Fixture:
    """A new export in one layout: rows go only into columns the layout has; NOT NULL columns given no value
    get 0 (or '' for text), as nsys fills fields a capture did not record."""

    def __init__(self, path: Path, creates: list[str]) -> None:
        self.con = sqlite3.connect(path)
        for sql in creates:
            self.con.executescript(sql)

    def columns(self, table: str) -> dict[str, tuple[str, bool]]:
        rows = self.con.execute(f"SELECT name, type, \"notnull\" FROM pragma_table_info('{table}')").fetchall()
        return {name: (type_.upper(), bool(notnull)) for name, type_, notnull in rows}

    def has(self, table: str) -> bool:
        return bool(self.columns(table))

    def insert(self, table: str, **values: object) -> None:
        cols = self.columns(table)
        if not cols:  # a table this layout does not have
            return
        row = {k: v for k, v in values.items() if k in cols}
        for name, (type_, notnull) in cols.items():
            if notnull and name not in row:
                row[name] = "" if "TEXT" in type_ else 0
        names = ", ".join(f'"{n}"' for n in row)
        self.con.execute(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def build(layout: str, tmp: Path) -> Path:
    path = tmp / f"{layout}.sqlite"
    f = Fixture(path, schema_of(layout, tmp))
    for i, s in STRINGS.items():
        f.insert("StringIds", id=i, value=s)
    for corr, launch, start, dur, demangled, short, launch_type in KERNELS:
        f.insert(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            start=launch,
            end=launch + 100,
            globalTid=GLOBAL_TID,
            correlationId=corr,
            nameId=1,
            eventClass=0,
            returnValue=0,
        )
        f.insert(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            start=start,
            end=start + dur,
            deviceId=0,
            contextId=1,
            streamId=7,
            correlationId=corr,
            globalPid=PID << 24,
            demangledName=demangled,
            shortName=short,
            launchType=launch_type,
            gridX=4,
            gridY=1,
            gridZ=1,
            blockX=128,
            blockY=1,
            blockZ=1,
            registersPerThread=32,
        )
    copy = {"start": 500, "end": 900, "deviceId": 0, "contextId": 1, "streamId": 7, "globalPid": PID << 24}
    f.insert("CUPTI_ACTIVITY_KIND_MEMCPY", **copy, bytes=4096, copyKind=1, srcKind=0, dstKind=2, correlationId=9)
    f.insert("CUPTI_ACTIVITY_KIND_MEMSET", **copy, bytes=1024, value=0, memKind=2, correlationId=10)
    if not f.has("NVTX_EVENTS"):
        f.con.execute(NVTX_PRE2022 if layout == "pre2022" else NVTX_TODAY)
    inline = "textId" not in f.columns("NVTX_EVENTS")
    for text_id, start, end in RANGES:
        text = {"text": STRINGS[text_id]} if inline else {"textId": text_id}
        f.insert("NVTX_EVENTS", start=start, end=end, eventType=59, globalTid=GLOBAL_TID, **text)
    f.insert("NVTX_EVENTS", start=2600, eventType=34, globalTid=GLOBAL_TID, text="a mark")
    gpu = {"name": "Tesla V100-SXM2-16GB", "smCount": 80, "computeMajor": 7, "computeMinor": 0}
    gpu |= {"threadsPerWarp": 32, "maxWarpsPerSm": 64, "maxBlocksPerSm": 32, "maxThreadsPerBlock": 1024}
    f.insert("TARGET_INFO_GPU", vmId=0, id=0, deviceId=0, cuDevice=0, **gpu)
    f.insert(  # pre-2022 only: the CUDA properties in their own table
        "TARGET_INFO_CUDA_GPU",
        vmId=0,
        deviceId=0,
        name=gpu["name"],
        numMultiprocessors=80,
        computeCapabilityMajor=7,
        computeCapabilityMinor=0,
        numThreadsPerWarp=32,
        maxWarpsPerMultiprocessor=64,
        maxBlocksPerMultiprocessor=32,
        maxThreadsPerBlock=1024,
    )
    meta = {"EXPORT_PRODUCT_VERSION": f"layout {layout}", "EXPORT_SCHEMA_VERSION": layout, "EXPORT_HOST": "box"}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        for name, value in meta.items():
            f.insert(table, name=name, value=value)
    f.insert("TARGET_INFO_SESSION_START_TIME", utcEpochNs=1_700_000_000_000_000_000, utcTime="2023-11-14T22:13:20")
    # Enum tables where the layout has them, with nsys's own rows (copied from the real 2025.3 export).
    real = sqlite3.connect(":memory:")
    real.execute("ATTACH ? AS s", (str(tmp / "raw-2025.3.sqlite"),))
    for enum, real_name in (
        ("ENUM_CUDA_KERNEL_LAUNCH_TYPE", "ENUM_CUDA_KERNEL_LAUNCH_TYPE"),
        ("ENUM_CUDA_KRENEL_LAUNCH_TYPE", "ENUM_CUDA_KERNEL_LAUNCH_TYPE"),
        ("ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEMCPY_OPER"),
        ("ENUM_CUDA_MEM_KIND", "ENUM_CUDA_MEM_KIND"),
    ):
        if f.has(enum):
            for i, name, label in real.execute(f"SELECT id, name, label FROM s.{real_name}"):
                f.insert(enum, id=i, name=name, label=label)
    f.con.commit()
    f.con.close()
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, set[str]]]:
    """layout -> (normalized folder, the tables its fixture has)."""
    tmp = tmp_path_factory.mktemp("layouts")
    schema_of("2025.3", tmp)  # the real export whose enum rows the fixtures copy
    out = {}
    for layout in LAYOUTS:
        dest, path = tmp / f"out-{layout}", build(layout, tmp)
        con = sqlite3.connect(path)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        con.close()
        normalize_file(path, dest)
        out[layout] = (dest, tables)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kernels_and_their_launches(built: dict, layout: str) -> None:
    out, _ = built[layout]
    rows = q(out, "SELECT correlation_id, start_ns, duration_ns, short_name, launch_type, pid, tid FROM kernels")
    labels = {1: "Regular", 2: "Coop Single Device"}  # nsys's labels of its launch-type enum
    assert sorted(rows) == [
        (corr, start, dur, STRINGS[short], labels[lt], PID, TID) for corr, _, start, dur, _, short, lt in KERNELS
    ]
    assert q(out, "SELECT sum(duration_ns) FROM kernels") == [(2300,)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_copies_devices_and_meta(built: dict, layout: str) -> None:
    out, tables = built[layout]
    # Each checked where the layout has the table (the dumps list only what their capture recorded).
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        assert q(out, "SELECT kind, src_kind, dst_kind, bytes FROM memcpy") == [
            ("Host-to-Device", "Pageable", "Device", 4096)
        ]
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        assert q(out, "SELECT mem_kind, bytes FROM memset") == [("Device", 1024)]
    if "TARGET_INFO_GPU" in tables:
        assert q(out, "SELECT device_id, name, sm_count, compute_major, max_threads_per_sm FROM devices") == [
            (0, "Tesla V100-SXM2-16GB", 80, 7, 2048)
        ]
    assert sum(t in tables for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "TARGET_INFO_GPU")) >= 1
    (version,) = q(out, "SELECT source_version FROM trace_meta")[0]
    assert version == (None if layout == "pre2022" else f"nsys layout {layout}; export schema {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_analysis_counts_kernels_per_layer(built: dict, layout: str) -> None:
    out, _ = built[layout]
    # (memory operations outside every range make a row with no kernels: left out here)
    rows = (
        connect(out)
        .sql("SELECT path, kernels, gpu_time_ns FROM layer_summary WHERE kernels > 0 ORDER BY path")
        .fetchall()
    )
    assert rows == [("model/conv1", 2, 1200), ("model/relu1", 2, 1100)]
    assert q(out, "SELECT count(*) FROM nvtx_marks") == [(1,)]


def test_enum_table_labels_win_over_the_built_in_ones(tmp_path: Path) -> None:
    # A layout with the (misspelled) enum table: its own label is used, whatever it says.
    schema_of("2025.3", tmp_path)
    path = build("3.0.0", tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE ENUM_CUDA_KRENEL_LAUNCH_TYPE SET label = 'Plain' WHERE id = 1")
    con.commit()
    con.close()
    normalize_file(path, tmp_path / "out")
    assert q(tmp_path / "out", "SELECT DISTINCT launch_type FROM kernels ORDER BY 1") == [
        ("Coop Single Device",),
        ("Plain",),
    ]


def test_empty_and_missing_optional_tables(tmp_path: Path) -> None:
    # No NVTX rows but marks, no session start rows, no metadata rows, no GPU table, no memcpy rows.
    schema_of("2025.3", tmp_path)
    path = build("3.15.0", tmp_path)
    con = sqlite3.connect(path)
    for sql in (
        "DELETE FROM NVTX_EVENTS WHERE eventType <> 34",
        "DELETE FROM TARGET_INFO_SESSION_START_TIME",
        "DELETE FROM META_DATA_EXPORT",
        "DROP TABLE TARGET_INFO_GPU",
        "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    ):
        con.execute(sql)
    con.commit()
    con.close()
    out = tmp_path / "out"
    result = normalize_file(path, out)
    assert result.rows["kernels"] == 4 and result.rows.get("nvtx_ranges", 0) == 0
    assert q(out, "SELECT source_version, capture_time_utc, host FROM trace_meta") == [(None, None, None)]
    assert connect(out).sql("SELECT path, kernels FROM layer_summary").fetchall() == [(None, 4)]


@pytest.mark.parametrize("threads", [False, True])
def test_missing_columns_are_null_and_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: bool) -> None:
    # A hand-built export with the fewest columns (like nsys-ai's fixtures): kernels without process,
    # registers or launch type; a runtime table without globalTid cannot link anything and is left out.
    # threads: the kernels read on a thread of their own connection, whose missing columns are said all the same.
    if threads:
        monkeypatch.setattr(nsys, "THREAD_MIN_ROWS", 1)
        monkeypatch.setattr(nsys, "cores", lambda: 2)
    path = tmp_path / "few.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, demangledName INTEGER)')
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, correlationId INTEGER)')
    con.execute("INSERT INTO StringIds VALUES (2, 'void k()')")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 2)", [(10, 15), (20, 27)])
    con.commit()
    con.close()
    result = normalize_file(path, tmp_path / "out")
    assert result.warnings[0] == "table CUPTI_ACTIVITY_KIND_RUNTIME lacks column(s) globalTid: left out"
    assert result.warnings[1].startswith("columns this export does not have, left null: ")
    assert "CUPTI_ACTIVITY_KIND_KERNEL.correlationId" in result.warnings[1]
    assert q(tmp_path / "out", "SELECT name, duration_ns, correlation_id FROM kernels ORDER BY 2") == [
        ("void k()", 5, None),
        ("void k()", 7, None),
    ]


def test_no_usable_kernel_table_is_one_bad_input_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, deviceId INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(BadInputError, match="lacks required column"):
        normalize_file(path, tmp_path / "out")
