"""Nsight Compute CSV layouts of other versions and replay modes, built here from their documented columns.

The 2019.5-2020.x details layout follows a public export of that era (rodinia cfd, nv-nsight-cu-cli 2020:
`"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream","Section Name",
"Metric Name","Metric Unit","Metric Value"`, launch sizes as Launch Statistics rows "Block Size" / "Grid Size"
holding products, units "nsecond", "cycle/second", "byte/block"); the --nvtx column name is the one ncu writes
today.  Expected values are the numbers written into each fixture, converted by hand.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES

OLD_DETAILS_HEADER = [
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
    "Section Name", "Metric Name", "Metric Unit", "Metric Value",
]  # fmt: skip
NVTX_CELL = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
# (section, metric, base unit, base value, auto unit, auto value) per launch: two launches of one kernel.
OLD_METRICS = [
    ("GPU Speed Of Light", "Duration", "nsecond", "8,992", "usecond", "8.99"),
    ("GPU Speed Of Light", "SM Frequency", "cycle/second", "1,138,271,055.75", "cycle/nsecond", "1.14"),
    ("GPU Speed Of Light", "SOL FB", "%", "46.47", "%", "46.47"),
    ("GPU Speed Of Light", "SM [%]", "%", "18.70", "%", "18.70"),
    ("Launch Statistics", "Block Size", "", "192", "", "192"),
    ("Launch Statistics", "Grid Size", "", "506", "", "506"),
    ("Launch Statistics", "Registers Per Thread", "register/thread", "20", "register/thread", "20"),
    ("Launch Statistics", "Static Shared Memory Per Block", "byte/block", "2,048", "Kbyte/block", "2.05"),
    ("Occupancy", "Theoretical Occupancy", "%", "93.75", "%", "93.75"),
]
KERNEL = "cuda_compute_step_factor(int,float*,float*,float*)"


def csv_text(rows: list[list[str]], chatter: bool = True) -> str:
    buf = io.StringIO()
    if chatter:
        buf.write("==PROF== Connected to process 28439 (/opt/rodinia/cfd)\n")
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def old_details(units: str, nvtx: bool) -> str:
    header = OLD_DETAILS_HEADER[:4] + ([NVTX_CELL] if nvtx else []) + OLD_DETAILS_HEADER[4:]
    rows = [header]
    for launch in (0, 1):
        for section, metric, bu, bv, au, av in OLD_METRICS:
            unit, value = (bu, bv) if units == "base" else (au, av)
            lead = [str(launch), "28439", "cfd_000", "127.0.0.1"]
            stack = ['854  "<default domain>:step:none:0:none:0:none:0"  "<default domain>:flux:none:0:none:0:none:0"']
            cells = [KERNEL, "2020-May-29 12:02:46", "1", "7", section, metric, unit, value]
            rows.append(lead + (stack if nvtx else []) + cells)
    return csv_text(rows)


def meta_warnings(out: Path) -> list[str]:
    (w,) = connect(out).sql("SELECT warnings FROM trace_meta").fetchall()[0]
    return json.loads(w)


@pytest.mark.parametrize("units", ["base", "auto"])
@pytest.mark.parametrize("nvtx", [False, True])
def test_2020_details_layout(tmp_path: Path, units: str, nvtx: bool) -> None:
    # Before: exit 2 "ncu CSV lacks launch columns ['Block Size', 'Grid Size', 'Device', 'CC']".
    src = tmp_path / "cfd_details.csv"
    src.write_text(old_details(units, nvtx))
    normalize_file(src, tmp_path / "out")
    con = connect(tmp_path / "out")
    got = con.sql(
        "SELECT launch_id, pid, name, context_id, stream_id, device_id, compute_capability, grid_x, block_x, "
        "nvtx_push_pop FROM ncu_kernels ORDER BY launch_id"
    ).fetchall()
    stack = "step/flux" if nvtx else None
    assert got == [(i, 28439, KERNEL, 1, 7, None, None, None, None, stack) for i in (0, 1)]
    values = dict(
        con.sql("SELECT metric, round(value, 2) FROM ncu_metrics WHERE launch_id = 0 AND rule IS NULL").fetchall()
    )
    # base: 8,992 nsecond; auto: 8.99 usecond = 8990 ns.  1,138,271,055.75 cycle/second vs 1.14 cycle/nsecond
    # = 1.14e9 Hz.  2,048 byte/block vs 2.05 Kbyte/block = 2050 byte/block (auto rounds to 3 digits).
    base = units == "base"
    assert values["Duration"] == (8992 if base else 8990)
    assert values["SM Frequency"] == (1138271055.75 if base else 1.14e9)
    assert values["Static Shared Memory Per Block"] == (2048 if base else 2050)
    assert (values["Block Size"], values["Grid Size"], values["Theoretical Occupancy"]) == (192, 506, 93.75)
    assert con.sql("SELECT count(*) FROM ncu_metrics").fetchall()[0] == (2 * len(OLD_METRICS),)
    assert "Kernel Time" not in {m for (m,) in con.sql("SELECT DISTINCT metric FROM ncu_metrics").fetchall()}
    w = meta_warnings(tmp_path / "out")
    assert any("no Grid Size, Block Size, Device, CC columns" in x for x in w), w
    # That era's display names ("GPU Speed Of Light" / "Duration", "SM [%]") are read as the raw metrics.
    wide = con.sql(
        "SELECT launch_id, duration_ns, sm_throughput_pct, theoretical_occupancy_pct, registers_per_thread "
        "FROM ncu_kernel_metrics ORDER BY launch_id"
    ).fetchall()
    assert wide == [(i, 8992 if base else 8990, 18.70, 93.75, 20) for i in (0, 1)]


def test_2020_2_nvtx_columns_list_fewer_fields(tmp_path: Path) -> None:
    # ncu 2020.2 with --nvtx (a public export of a GCN run, 2021): both NVTX columns, whose header cells list two
    # fields after the range name where ncu writes six today; a start/end item as that export writes it, padded
    # with spaces, beside an empty push/pop cell.  Before: both columns NULL, no warning.
    nvtx_header = ["thread Domain:Push/Pop_Range:PL_Type:PL_Value", "Id:Domain:Start/Stop_Range:PL_Type:PL_Value"]
    header = [*OLD_DETAILS_HEADER[:4], *nvtx_header, *OLD_DETAILS_HEADER[4:]]
    cells = [
        ['854  "<default domain>:step:none:none"  "NCCL:all:reduce:none:none"',
         ' "0:<default domain>:convLayer:none:none" '],
        ["", ' "3:<default domain>:conv:Layer:none:none" "4:mine:fc:none:none" '],
    ]  # fmt: skip
    rows = [header]
    for launch, nvtx in enumerate(cells):
        section, metric, unit, value, _, _ = OLD_METRICS[0]
        rows.append([str(launch), "2211167", "python3.8", "127.0.0.1", *nvtx, KERNEL, "2020-May-29 12:02:46", "1",
                     "7", section, metric, unit, value])  # fmt: skip
    src = tmp_path / "gcn_nvtx.csv"
    src.write_text(csv_text(rows))
    normalize_file(src, tmp_path / "out")
    got = (
        connect(tmp_path / "out")
        .sql("SELECT launch_id, nvtx_push_pop, nvtx_start_end FROM ncu_kernels ORDER BY launch_id")
        .fetchall()
    )
    # A name may hold colons (conv:Layer); another domain's items keep it as a prefix (NCCL:all:reduce).
    assert got == [(0, "step/NCCL:all:reduce", "convLayer"), (1, None, "conv:Layer/mine:fc")]


def test_2020_raw_layout_kernel_time_is_not_a_metric(tmp_path: Path) -> None:
    header = [*OLD_DETAILS_HEADER[:8], "gpu__time_duration.sum", "launch__grid_size", "launch__block_size"]
    units = [""] * 8 + ["nsecond", "", ""]
    rows = [header, units]
    rows += [[str(i), "28439", "cfd_000", "127.0.0.1", KERNEL, "2020-May-29 12:02:46", "1", "7", "8,992", "506", "192"]
             for i in (0, 1, 2)]  # fmt: skip
    src = tmp_path / "cfd_raw.csv"
    src.write_text(csv_text(rows))
    normalize_file(src, tmp_path / "out")
    con = connect(tmp_path / "out")
    assert con.sql("SELECT count(*), count(DISTINCT launch_id) FROM ncu_kernels").fetchall()[0] == (3, 3)
    got = con.sql("SELECT metric, value, unit FROM ncu_metrics WHERE launch_id = 2 ORDER BY metric").fetchall()
    assert got == [("gpu__time_duration.sum", 8992.0, "ns"), ("launch__block_size", 192.0, None),
                   ("launch__grid_size", 506.0, None)]  # fmt: skip


# Today's layout (2023+ details page) with --nvtx, as --replay-mode app-range writes it: one result per range.
NEW_HEADER = [
    "ID", "Process ID", "Process Name", "Host Name", NVTX_CELL, "Kernel Name", "Context", "Stream", "Block Size",
    "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
]  # fmt: skip


def range_replay_rows(ranges: list[str]) -> list[list[str]]:
    rows = [NEW_HEADER]
    for i, name in enumerate(ranges):
        stack = f'0  "<default domain>:{name}:none:0:none:0:none:0"'
        lead = [str(i), "4242", "python3", "127.0.0.1", stack, "range", "1", "n/a", "n/a", "n/a", "0", "9.0"]
        rows.append([*lead, "GPU Speed Of Light Throughput", "Duration", "us", f"{10 * (i + 1)}.00"])
        rows.append([*lead, "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "12.5"])
    return rows


def test_app_range_replay_gives_one_row_per_range(tmp_path: Path) -> None:
    # Before: exit 2.  Now: each range is one ncu_kernels row (name 'range', no launch shape, stream NULL).
    src = tmp_path / "ranges.csv"
    src.write_text(csv_text(range_replay_rows(["layer1", "layer2", "fc"])))
    normalize_file(src, tmp_path / "out")
    con = connect(tmp_path / "out")
    got = con.sql(
        "SELECT launch_id, name, stream_id, grid_x, block_x, device_id, compute_capability, nvtx_push_pop "
        "FROM ncu_kernels ORDER BY launch_id"
    ).fetchall()
    assert got == [(i, "range", None, None, None, 0, "9.0", n) for i, n in enumerate(["layer1", "layer2", "fc"])]
    durations = con.sql("SELECT value FROM ncu_metrics WHERE metric = 'Duration' ORDER BY launch_id").fetchall()
    assert durations == [(10000.0,), (20000.0,), (30000.0,)]  # 10.00 us -> 10,000 ns
    assert any("3 range-replay result(s)" in x for x in meta_warnings(tmp_path / "out"))
    assert con.sql("SELECT count(*) FROM ncu_kernel_match").fetchall()[0] == (0,)


@pytest.mark.parametrize(
    ("first_line", "page"),
    [
        ('"Launch Settings","Name","Value"', "--page session"),
        ('"Section","Attribute","Value"', "--page session"),
        ('"Address","Source","Warp Stall Sampling (All Samples)"', "--page source"),
        # --print-summary per-kernel's header as a project's documentation quotes it (ncu 2025.3.1)
        (
            '"Process ID","Process Name","Host Name","Kernel Name","Block Size","Grid Size","Device","CC",'
            '"Invocations","Section Name","Metric Name","Metric Unit","Minimum","Maximum","Average"',
            "--print-summary",
        ),
    ],
)
@pytest.mark.parametrize("chatter", ["==PROF== Connected\n", ""])  # live output, or ncu -i REP --csv > FILE
def test_pages_without_launch_rows_are_named(tmp_path: Path, first_line: str, page: str, chatter: str) -> None:
    src = tmp_path / "report.csv"
    src.write_text(f'{chatter}{first_line}\n"a","b","c"\n')
    with pytest.raises(BadInputError) as e:
        normalize_file(src, tmp_path / "out")
    msg = str(e.value)
    assert f"ncu's {page} export" in msg and "--csv --page raw" in msg


def test_utf16_export_reads_as_utf8(tmp_path: Path) -> None:
    # Windows PowerShell 5's `ncu --csv ... > out.csv` writes UTF-16LE with a byte-order mark: the same table.
    text = gzip.decompress((SAMPLES / "h200_resnet18" / "ncu_details.csv.gz").read_bytes()).decode("utf-8")
    tables = {}
    for name, encoding in (("utf8", "utf-8"), ("utf16", "utf-16")):
        src = tmp_path / name / "ncu_details.csv"
        src.parent.mkdir()
        src.write_bytes(text.encode(encoding))
        normalize_file(src, tmp_path / f"out-{name}")
        con = connect(tmp_path / f"out-{name}")
        tables[name] = [
            con.sql(f"SELECT * EXCLUDE (trace_id) FROM {t} ORDER BY ALL").fetchall()
            for t in ("ncu_kernels", "ncu_metrics")
        ]
    assert (tmp_path / "utf16" / "ncu_details.csv").read_bytes()[:2] == b"\xff\xfe"
    assert tables["utf16"] == tables["utf8"] and len(tables["utf8"][0]) > 0
