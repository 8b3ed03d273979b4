"""The ncu CSV normalizer and its views on real H200 captures; expected values come from the CSV via csv.reader."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import sqlite3
from pathlib import Path

import duckdb
import pytest

from pipeline.analyze import connect
from pipeline.errors import BadInputError
from pipeline.normalize import normalize_file
from pipeline.store import trace_ids
from tests.conftest import SAMPLES, SMALLCNN

UNITS = SAMPLES / "h200_ncu_units"
RAW, DETAILS = "h200_smallcnn.ncu_raw", "h200_smallcnn.ncu_details"
AUTO, BASE, TENSOR = (f"h200_ncu_units.{n}" for n in ("smallcnn_raw_auto", "smallcnn_raw_base", "tensor_raw_base"))
NSYS = "h200_smallcnn.nsys"


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()


def csv_rows(path: Path) -> list[list[str]]:
    """The table the independent way: csv.reader over the lines that start with a quote."""
    return list(csv.reader(io.StringIO("".join(ln for ln in read_text(path).splitlines(True) if ln.startswith('"')))))


def num(s: str) -> float:
    return float(s.replace(",", ""))


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ncu")
    normalize_file(SMALLCNN / "nsys.sqlite.gz", out)
    for f in (SMALLCNN / "ncu_raw.csv", SMALLCNN / "ncu_details.csv.gz"):
        normalize_file(f, out)
    for f in ("smallcnn_raw_auto", "smallcnn_raw_base", "tensor_raw_base"):
        normalize_file(UNITS / f"{f}.csv.gz", out)
    return out


@pytest.fixture(scope="module")
def con(out: Path) -> duckdb.DuckDBPyConnection:
    return connect(out)


def raw_by_id(path: Path) -> tuple[list[str], list[str], dict[int, list[str]]]:
    rows = csv_rows(path)
    return rows[0], rows[1], {int(r[0]): r for r in rows[2:]}


def test_raw_page_kernels_metrics_and_warning(con: duckdb.DuckDBPyConnection) -> None:
    header, units, by_id = raw_by_id(SMALLCNN / "ncu_raw.csv")
    assert units[0] == ""  # the units row
    n_metrics = len(header) - 13  # everything after "CC" is a metric
    assert con.sql(f"SELECT count(*) FROM ncu_kernels WHERE trace_id = '{RAW}'").fetchall() == [(len(by_id),)]
    assert con.sql(f"SELECT count(*) FROM ncu_metrics WHERE trace_id = '{RAW}'").fetchall() == [
        (len(by_id) * n_metrics,)
    ]
    (fmt, version, warnings) = con.sql(
        f"SELECT source_format, source_version, warnings FROM trace_meta WHERE trace_id = '{RAW}'"
    ).fetchall()[0]
    assert (fmt, version) == ("ncu-csv", "ncu --csv --page raw")
    # ==WARNING==, ==PROF== Connected, the program's "ok", ==PROF== Disconnected
    assert json.loads(warnings)[0].startswith("skipped 4 non-CSV lines")
    r = by_id[1]
    assert con.sql(
        "SELECT pid, process_name, host, name, context_id, stream_id, device_id, compute_capability, "
        "grid_x, grid_y, grid_z, block_x, block_y, block_z, nvtx_push_pop, nvtx_start_end "
        f"FROM ncu_kernels WHERE trace_id = '{RAW}' AND launch_id = 1"
    ).fetchall() == [(854, r[2], r[3], r[6], 1, 7, 0, "9.0", 1024, 1, 1, 8, 8, 1, "conv1", None)]
    assert r[10] == "(1024, 1, 1)" and r[9] == "(8, 8, 1)"
    # The profiled pass runs inside the "step" range: the push/pop stack, outermost first.
    stacks = con.sql(f"SELECT nvtx_push_pop FROM ncu_kernels WHERE trace_id = '{RAW}' ORDER BY launch_id").fetchall()
    assert [s for (s,) in stacks[25:]] == [
        f"step/{m}" for m in ("conv1", "conv1", "relu", "conv2", "conv2", "relu", "pool", "fc")
    ]
    assert stacks[0] == (None,) and by_id[0][4] == ""


def test_raw_values_are_the_printed_numbers_in_base_units(con: duckdb.DuckDBPyConnection) -> None:
    header, units, by_id = raw_by_id(SMALLCNN / "ncu_raw.csv")
    for metric in (
        "gpu__time_duration.sum",
        "launch__shared_mem_per_block_static",
        "dram__cycles_elapsed.avg.per_second",
    ):
        i = header.index(metric)
        got = con.sql(
            f"SELECT value, unit, raw_value, raw_unit FROM ncu_metrics WHERE trace_id = '{RAW}' "
            f"AND launch_id = 1 AND metric = '{metric}'"
        ).fetchall()
        assert got == [(num(by_id[1][i]), {"hz": "Hz"}.get(units[i], units[i]), by_id[1][i], units[i])]
    # a text metric keeps its text and has no value
    assert con.sql(
        f"SELECT value, raw_value FROM ncu_metrics WHERE trace_id = '{RAW}' AND launch_id = 1 "
        "AND metric = 'device__attribute_display_name'"
    ).fetchall() == [(None, "NVIDIA H200")]


def test_auto_and_base_units_of_one_report_agree(con: duckdb.DuckDBPyConnection) -> None:
    """ncu's default auto units ("us", "Kbyte", "Ghz", "Gbyte/s") vs --print-units base, same measurement."""
    a_head, a_units, a = raw_by_id(UNITS / "smallcnn_raw_auto.csv.gz")
    b_head, b_units, b = raw_by_id(UNITS / "smallcnn_raw_base.csv.gz")
    assert a_head == b_head
    # Independent reading of the convention: the scaled string times its prefix is the base string.
    i = a_head.index("launch__shared_mem_config_size")
    assert (a_units[i], b_units[i], a[1][i], b[1][i]) == ("Kbyte", "byte", "102.400000", "102,400")
    i = a_head.index("gpu__time_duration.sum")
    assert (a_units[i], b_units[i]) == ("us", "ns") and num(a[1][i]) * 1e3 == pytest.approx(num(b[1][i]))
    rows = con.sql(
        f"""SELECT a.metric, a.raw_unit, b.raw_unit, a.unit, b.unit, a.value, b.value
            FROM ncu_metrics a JOIN ncu_metrics b USING (launch_id, metric)
            WHERE a.trace_id = '{AUTO}' AND b.trace_id = '{BASE}'"""
    ).fetchall()
    assert len(rows) == 33 * (len(a_head) - 13)
    assert {r[1] for r in rows} >= {"us", "Kbyte", "Mbyte", "Gbyte", "Ghz", "Gbyte/s", "Kbyte/block"}
    for metric, _, _, ua, ub, va, vb in rows:
        assert ua == ub, metric
        assert (va is None) == (vb is None), metric
        if va is not None:  # base prints 2 decimals, auto 6 significant: allow the rounding of either
            assert math.isclose(va, vb, rel_tol=1e-5, abs_tol=0.0051), (metric, va, vb)


def test_details_page_metrics_and_rules(con: duckdb.DuckDBPyConnection) -> None:
    rows = csv_rows(SMALLCNN / "ncu_details.csv.gz")
    h, data = rows[0], rows[1:]
    col = {n: h.index(n) for n in ("ID", "Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name")}
    assert con.sql(f"SELECT count(*), count(rule) FROM ncu_metrics WHERE trace_id = '{DETAILS}'").fetchall() == [
        (len(data), sum(1 for r in data if len(r) > col["Rule Name"] and r[col["Rule Name"]]))
    ]
    assert con.sql(f"SELECT count(*) FROM ncu_kernels WHERE trace_id = '{DETAILS}'").fetchall() == [(33,)]
    dur = next(r for r in data if r[0] == "1" and r[col["Metric Name"]] == "Duration")
    assert dur[col["Metric Unit"]] == "ns"
    assert con.sql(
        f"SELECT section, value, unit FROM ncu_metrics WHERE trace_id = '{DETAILS}' AND launch_id = 1 "
        "AND metric = 'Duration'"
    ).fetchall() == [(dur[col["Section Name"]], num(dur[col["Metric Value"]]), "ns")]
    rule = next(r for r in data if r[0] == "0" and len(r) > 17 and r[col["Rule Name"]] == "AchievedOccupancy")
    assert con.sql(
        f"SELECT metric, value, unit, rule_type, rule_description FROM ncu_metrics WHERE trace_id = '{DETAILS}' "
        "AND launch_id = 0 AND rule = 'AchievedOccupancy'"
    ).fetchall() == [
        (f"estimated_speedup.{rule[h.index('Estimated Speedup Type')]}", num(rule[-1]), "%", rule[18], rule[19])
    ]


def test_every_ncu_launch_matches_exactly_one_nsys_kernel(con: duckdb.DuckDBPyConnection, nsys_sqlite: Path) -> None:
    """ncu profiled the whole run: 1 randn kernel + 3 warm-up passes x 8 + the profiled pass x 8 = 33
    launches; nsys also recorded all 33 (its capture range is the whole process). So "every launch
    matches" means a bijection: each of the 33 ncu launches pairs with one nsys kernel and vice versa."""
    for ncu in (RAW, DETAILS):
        rows = con.sql(
            f"SELECT launch_id, kernel_id FROM ncu_kernel_match WHERE ncu_trace_id = '{ncu}' AND trace_id = '{NSYS}'"
        ).fetchall()
        assert len(rows) == 33
        assert sorted(r[0] for r in rows) == list(range(33))
        assert sorted(r[1] for r in rows) == list(range(33))
    # Independent: both tools measured the registers of each kernel; every matched pair agrees.
    ncu_regs = {
        i: int(r[raw_by_id(SMALLCNN / "ncu_raw.csv")[0].index("launch__registers_per_thread")])
        for i, r in raw_by_id(SMALLCNN / "ncu_raw.csv")[2].items()
    }
    db = sqlite3.connect(nsys_sqlite)
    nsys_regs = [r for (r,) in db.execute("SELECT registersPerThread FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")]
    pairs = con.sql(
        f"SELECT launch_id, kernel_id FROM ncu_kernel_match WHERE ncu_trace_id = '{RAW}' AND trace_id = '{NSYS}'"
    ).fetchall()
    assert all(ncu_regs[lid] == nsys_regs[kid] for lid, kid in pairs)
    assert len(set(nsys_regs)) > 3  # the check can tell kernels apart


def _limiter(row: list[str], header: list[str]) -> str:
    limits = {
        k: num(row[header.index(f"launch__occupancy_limit_{k}")])
        for k in ("blocks", "registers", "shared_mem", "warps", "barriers")
    }
    low = min(limits.values())
    return "+".join(k for k, v in limits.items() if v == low)


@pytest.mark.parametrize("launch", [1, 8])  # implicit_convolve_sgemm (conv1), gemmSN_TN_kernel (fc)
def test_kernel_metrics_row_from_the_raw_page(con: duckdb.DuckDBPyConnection, launch: int) -> None:
    h, _, by_id = raw_by_id(SMALLCNN / "ncu_raw.csv")
    r = by_id[launch]
    v = lambda m: num(r[h.index(m)])  # noqa: E731
    got = con.sql(
        "SELECT duration_ns, sm_throughput_pct, achieved_occupancy_pct, theoretical_occupancy_pct, "
        "occupancy_limiter, waves_per_sm, registers_per_thread, ffma_inst, tensor_macs, macs "
        f"FROM ncu_kernel_metrics WHERE trace_id = '{RAW}' AND launch_id = {launch}"
    ).fetchall()
    assert got == [
        (
            v("gpu__time_duration.sum"),
            v("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            v("sm__warps_active.avg.pct_of_peak_sustained_active"),
            v("sm__maximum_warps_per_active_cycle_pct"),
            _limiter(r, h),
            v("launch__waves_per_multiprocessor"),
            v("launch__registers_per_thread"),
            None,  # the sample's default sections collect no FMA counters ...
            None,  # ... and no tensor op counters
            None,
        )
    ]
    assert not any("ffma" in c or "ops_path_tensor" in c for c in h)
    assert got[0][4] == {1: "registers", 8: "registers"}[launch]


def test_fma_and_tensor_macs(con: duckdb.DuckDBPyConnection) -> None:
    h, _, by_id = raw_by_id(UNITS / "smallcnn_raw_base.csv.gz")
    ops = ("ffma", "fadd", "fmul", "hfma", "dfma")
    for launch in (1, 4):  # conv1 implicit gemm, conv2 xmma gemm
        r = by_id[launch]
        want = [num(r[h.index(f"smsp__sass_thread_inst_executed_op_{o}_pred_on.sum")]) for o in ops]
        got = con.sql(
            "SELECT ffma_inst, fadd_inst, fmul_inst, hfma_inst, dfma_inst, fma_inst, macs FROM ncu_kernel_metrics "
            f"WHERE trace_id = '{BASE}' AND launch_id = {launch}"
        ).fetchall()
        assert got == [(*want, want[0] + want[3] + want[4], want[0] + want[3] + want[4])]
        assert want[0] > 1e6
    # tensor_model.py: three (512x256) @ (256x128) matmuls in fp16, bf16, tf32: 512*256*128 MACs each.
    h, _, by_id = raw_by_id(UNITS / "tensor_raw_base.csv.gz")
    gemms = sorted(i for i, r in by_id.items() if "distribution" not in r[h.index("Kernel Name")])
    assert len(gemms) == 3
    got = con.sql(
        f"SELECT launch_id, tensor_macs FROM ncu_kernel_metrics WHERE trace_id = '{TENSOR}' AND tensor_macs > 0"
    ).fetchall()
    assert got == [(i, 512 * 256 * 128) for i in gemms]


def test_plain_and_gzip_give_the_same_tables(tmp_path: Path, out: Path) -> None:
    gz = tmp_path / "x" / "ncu_raw.csv.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress((SMALLCNN / "ncu_raw.csv").read_bytes()))
    normalize_file(gz, out, trace_id="gz_copy")
    con = connect(out)
    diff = con.sql(
        f"""SELECT count(*) FROM (SELECT * EXCLUDE (trace_id) FROM ncu_metrics WHERE trace_id = '{RAW}'
            EXCEPT ALL SELECT * EXCLUDE (trace_id) FROM ncu_metrics WHERE trace_id = 'gz_copy')"""
    ).fetchall()
    assert diff == [(0,)]


def _bad(tmp_path: Path, name: str, data: bytes) -> str:
    f = tmp_path / name
    f.write_bytes(data)
    out = tmp_path / "out"
    with pytest.raises(BadInputError) as e:
        normalize_file(f, out)
    assert trace_ids(out) == [] and not list(out.glob("ncu_*/trace_id=*"))  # nothing written
    return e.value.reason


def test_bad_inputs_are_refused_with_a_reason(tmp_path: Path) -> None:
    raw = (SMALLCNN / "ncu_raw.csv").read_bytes()
    assert "named like an ncu CSV but its content is none" in _bad(tmp_path, "other.csv", b"a,b\n1,2\n")
    assert "no Nsight Compute CSV table" in _bad(tmp_path, "log.csv", b"==PROF== Connected to process 1\nok\n")
    assert "does not start with" in _bad(tmp_path, "mixed.csv", b'==PROF== Connected\n"a","b"\n"1","2"\n')
    assert "profiled no kernels" in _bad(tmp_path, "empty.csv", (UNITS / "empty_run.log").read_bytes())
    body = raw.rstrip(b"\n")
    last_start = body.rfind(b"\n") + 1
    # cut inside a quoted cell of the last row
    cut = body[: last_start + body[last_start:].index(b'"(128, 1, 1)') + 4]
    assert "cut off inside a quoted cell" in _bad(tmp_path, "cut1.csv", cut)
    # cut just after a closing quote: the row has fewer cells than the header
    cut = body[: last_start + body[last_start:].index(b'"(128, 1, 1)') + len(b'"(128, 1, 1)"')] + b"\n"
    assert "fewer cells than the header" in _bad(tmp_path, "cut2.csv", cut)
    assert "header but no" in _bad(tmp_path, "header_only.csv", body[: body.index(b"\n", raw.index(b'"ID"')) + 1])
    details = read_text(SMALLCNN / "ncu_details.csv.gz").encode().rstrip(b"\n")
    cut = details[: details.rfind(b'","') + 1] + b"\n"  # drop the last cells of the last row
    assert "truncated" in _bad(tmp_path, "cut3.csv", cut)


@pytest.mark.parametrize(("name", "encoding"), [("ncu.csv", "utf-8"), ("ncu.txt", "utf-8"), ("ncu.csv", "utf-16")])
def test_program_output_longer_than_the_head_before_the_table(tmp_path: Path, name: str, encoding: str) -> None:
    # `ncu --csv > FILE` puts the profiled program's output first: a public ncu 2020.2 export (2021) opens with a
    # printed tensor of 105 lines, its first ==PROF== line at byte 8,186.  The real H200 raw page here, after 10 KB
    # of such lines.  Before: exit 2 "named like an ncu CSV but its content is none of the known formats" (.csv),
    # "unrecognised format" (.txt): the format was told from the first 8 KB only.
    tensor = [f"        [{', '.join(f'{i * 0.001:.8f}' for i in range(k, k + 8))}]," for k in range(0, 1200, 8)]
    src = tmp_path / name
    program = "Tensor(shape=[150, 8], dtype=float32,\n" + "\n".join(tensor) + "\n"
    src.write_text(program + read_text(SMALLCNN / "ncu_raw.csv"), encoding=encoding)
    assert src.read_bytes()[:8192].find(b"==") == -1
    normalize_file(src, tmp_path / "out")
    (rows, warnings) = (
        connect(tmp_path / "out")
        .sql("SELECT (SELECT count(*) FROM ncu_kernels), warnings FROM trace_meta")
        .fetchall()[0]
    )
    assert rows == len(raw_by_id(SMALLCNN / "ncu_raw.csv")[2])
    assert json.loads(warnings)[0].startswith(f"skipped {4 + 1 + len(tensor)} non-CSV lines")
