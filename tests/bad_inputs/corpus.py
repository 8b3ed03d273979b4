"""The bad-input corpus: each case derived from a real sample by one documented defect.

Cases are built on demand (the sqlite ones would add megabytes to the repo), deterministically, so
every run tests the same bytes. ``python -m tests.bad_inputs.corpus DIR`` writes them all to DIR for
trying by hand (``tracepipe normalize DIR``).

Each case says what must happen: ``error`` -> normalize raises BadInputError whose message contains the
text (the CLI prints it on one line and exits 2); ``warning`` -> normalize succeeds and a counted warning
containing the text is recorded in trace_meta.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import shutil
import sqlite3
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMALLCNN = ROOT / "sample_traces" / "h200_smallcnn"


@dataclass(frozen=True)
class Case:
    name: str  # file name written; its extension is part of the case
    make: Callable[[Path], None]
    error: str | None = None
    warning: str | None = None


def _nsys(dest: Path) -> None:
    with gzip.open(SMALLCNN / "nsys.sqlite.gz", "rb") as f, open(dest, "wb") as g:
        shutil.copyfileobj(f, g)


def _nsys_sql(script: str) -> Callable[[Path], None]:
    def make(dest: Path) -> None:
        _nsys(dest)
        db = sqlite3.connect(dest)
        db.executescript(script)
        db.commit()
        db.close()

    return make


def _cut(make: Callable[[Path], None], fraction: float) -> Callable[[Path], None]:
    def cut(dest: Path) -> None:
        make(dest)
        data = dest.read_bytes()
        dest.write_bytes(data[: int(len(data) * fraction)])

    return cut


def _flip(make: Callable[[Path], None], offset: int, n: int = 64) -> Callable[[Path], None]:
    def flip(dest: Path) -> None:
        make(dest)
        data = bytearray(dest.read_bytes())
        for i in range(offset, offset + n):
            data[i] ^= 0xFF
        dest.write_bytes(bytes(data))

    return flip


def _gzip_cut(make: Callable[[Path], None], fraction: float) -> Callable[[Path], None]:
    def gz(dest: Path) -> None:
        plain = dest.with_suffix("")
        make(plain)
        blob = gzip.compress(plain.read_bytes())
        plain.unlink()
        dest.write_bytes(blob[: int(len(blob) * fraction)])

    return gz


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda dest: dest.write_bytes(data)


NSYS_CASES = [
    Case("nsys_truncated_10pct.sqlite", _cut(_nsys, 0.10), error="SQLite file truncated"),
    Case("nsys_truncated_50pct.sqlite", _cut(_nsys, 0.50), error="SQLite file truncated"),
    Case("nsys_truncated_95pct.sqlite", _cut(_nsys, 0.95), error="SQLite file truncated"),
    Case("nsys_truncated_header.sqlite", _cut(_nsys, 50 / 405504), error="header is cut short"),
    Case("nsys_flipped_magic.sqlite", _flip(_nsys, 0, 8), error="content is none of the known formats"),
    Case("nsys_flipped_page.sqlite", _flip(_nsys, 122880), error="database disk image is malformed"),
    Case("nsys_empty.sqlite", _bytes(b""), error="file is empty"),
    Case("nsys_is_json.sqlite", _bytes(b'{"traceEvents": []}'), error="content looks like a JSON chrome trace"),
    Case("nsys_gzip_cut.sqlite.gz", _gzip_cut(_nsys, 0.5), error="gzip stream ends early"),
    # An export without kernels (an idle rank, a capture without -t cuda) is a trace all the same.
    Case(
        "nsys_no_kernel_table.sqlite",
        _nsys_sql("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;"),
        warning="no CUPTI_ACTIVITY_KIND_KERNEL table",
    ),
    Case("nsys_no_stringids.sqlite", _nsys_sql("DROP TABLE StringIds;"), error="StringIds table is missing"),
    Case(
        "nsys_kernel_without_start.sqlite",
        _nsys_sql("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN start TO begin_ts;"),
        error="lacks required column(s) start",
    ),
    # The capture stopped inside two ranges: nsys stores them with a NULL end (pushes without pops); they last to
    # the last NVTX timestamp, as nsys's reports read them.
    Case(
        "nsys_unended_ranges.sqlite",
        _nsys_sql(
            'UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS '
            "WHERE text = 'fc' LIMIT 2);"
        ),
        warning="2 NVTX range(s) stored without an end: each lasts to the last NVTX",
    ),
    Case(
        "nsys_orphan_kernels.sqlite",
        _nsys_sql(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = correlationId + 10000000 "
            "WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 3);"
        ),
        warning="3 kernels match no launching API call",
    ),
    Case(
        "nsys_negative_duration.sqlite",
        _nsys_sql('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 5 WHERE rowid = 1;'),
        warning="1 kernels end before they start",
    ),
]


def _chrome_text() -> str:
    return gzip.decompress((SMALLCNN / "torch_trace.json.gz").read_bytes()).decode()


def _chrome(edit: Callable[[str], str] = lambda s: s) -> Callable[[Path], None]:
    return lambda dest: dest.write_text(edit(_chrome_text()))


def packed(kind: str) -> Callable[[Path], None]:
    """The sample's trace as one member of an archive (kind: zip, tar.gz, xz, bz2), written under the case's name."""

    def make(dest: Path) -> None:
        data = _chrome_text().encode()
        if kind == "zip":
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                z.writestr("trace.json", data)
            dest.write_bytes(buf.getvalue())
        elif kind == "tar.gz":
            info = tarfile.TarInfo("trace.json")
            info.size = len(data)
            with tarfile.open(dest, "w:gz") as t:
                t.addfile(info, io.BytesIO(data))
        else:
            dest.write_bytes(lzma.compress(data) if kind == "xz" else bz2.compress(data))

    return make


def _ncu(edit: Callable[[list[str], int], list[str]]) -> Callable[[Path], None]:
    def make(dest: Path) -> None:
        lines = (SMALLCNN / "ncu_raw.csv").read_text().splitlines(keepends=True)
        header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
        dest.write_text("".join(edit(lines, header)))

    return make


def _add_column(lines: list[str], header: int) -> list[str]:
    return lines[:header] + [
        line.rstrip("\n") + (',"extra__metric"\n' if i == 0 else ',"7"\n') for i, line in enumerate(lines[header:])
    ]


_FIRST_KERNEL = '"ts": 5357790672405.161, "dur": 7.136'


def _after_first_kernel(text: str, old: str, new: str) -> str:
    """``old`` replaced by ``new`` once, in the first kernel event (or after it)."""
    at = text.index(_FIRST_KERNEL)
    return text[:at] + text[at:].replace(old, new, 1)


CHROME_CASES = [
    Case("chrome_truncated_50pct.json", _chrome(lambda s: s[: len(s) // 2]), error="JSON ends early"),
    Case("chrome_truncated_99pct.json", _chrome(lambda s: s[: int(len(s) * 0.99)]), error="JSON ends early"),
    Case("chrome_gzip_cut.json.gz", _gzip_cut(_chrome(), 0.6), error="gzip stream ends early"),
    Case("chrome_not_a_trace.json", _bytes(b'{"schemaVersion": 1, "events": []}'), error="no traceEvents array"),
    Case("chrome_events_not_a_list.json", _bytes(b'{"traceEvents": 5}'), error="got `int`"),
    # a real memory-timeline export's shape (torch.profiler's export_memory_timeline: [times, bytes per category],
    # two lists of 16,418 items): once "Expected `object`, got `array` - at `$.traceEvents[0]`", a key the file does
    # not have, then an array "whose items are not event objects", naming neither the file's kind nor the fix
    Case(
        "chrome_memory_timeline.json",
        _bytes(b"[[1726077563878112, 1726077563891027, 1726077563891064], [[0, 1], [2, 3], [4, 5]]]"),
        error="JSON is not a chrome trace: it is a PyTorch memory timeline (profile.export_memory_timeline: "
        "[times, bytes per category]), not a trace: write the trace with prof.export_chrome_trace(path)",
    ),
    Case(  # two lists of different lengths, or of other items: no memory timeline
        "chrome_array_of_lists.json",
        _bytes(b"[[1.5, 2.5, 3.5], [[0, 1], [2, 3]]]"),
        error="JSON is not a chrome trace: a top-level array whose items are not event objects",
    ),
    Case("chrome_empty.json", _bytes(b""), error="file is empty"),
    # a trace shipped in an archive (HTA's own test data holds a .tar.gz of Kineto traces): named, with the fix
    Case("chrome_zipped.json", packed("zip"), error="but it is a ZIP archive (an .xlsx workbook is one); unzip it"),
    Case("chrome_tarred.json.gz", packed("tar.gz"), error="but it is a tar archive; unpack it (tar -xf)"),
    Case("chrome_xz.json", packed("xz"), error="but it is an xz archive; decompress it (xz -d)"),
    Case("chrome_bz2.json", packed("bz2"), error="but it is a bzip2 archive; decompress it (bunzip2)"),
    # an NVIDIA Visual Profiler session's first lines, as real ones of 2019-2021 open (MIT repositories)
    Case(
        "visual_profiler_session.sqlite",
        _bytes(
            b'<?xml version="1.0"?>\n<session version="2" name="profile.nvvp" hscale="1.0E-6" normalize="false">\n'
            b'<timelineoptions enabletimerange="false" start="-1" end="-1"/>\n</session>\n'
        ),
        error="it is an NVIDIA Visual Profiler session (.nvvp XML: settings, no profile data",
    ),
    # PyTorch <= 1.7's autograd profiler (export_chrome_trace before Kineto): a bare list, no categories but its
    # flow arrows', the GPU rows under the pid "CUDA functions" (torch/autograd/profiler.py of PyTorch 1.7).
    Case(
        "chrome_legacy_autograd_profiler.json",
        _bytes(
            b'[{"name": "aten::conv2d", "ph": "X", "ts": 10.5, "dur": 30.2, "tid": 1, "pid": "CPU functions", '
            b'"args": {}}, {"name": "aten::conv2d", "ph": "s", "ts": 10.5, "tid": 1, "pid": "CPU functions", '
            b'"id": 0, "cat": "cpu_to_cuda", "args": {}}, {"name": "aten::conv2d", "ph": "f", "ts": 50.0, "tid": 0, '
            b'"pid": "CUDA functions", "id": 0, "cat": "cpu_to_cuda", "args": {}}, {"name": "aten::conv2d", '
            b'"ph": "X", "ts": 50.0, "dur": 12.0, "tid": 0, "pid": "CUDA functions", "args": {}}]'
        ),
        error="written by the legacy autograd profiler's export",
    ),
    # Nsight Systems' JSON export (`nsys export --type json`): one object per line, as its documentation shows.
    Case(
        "chrome_nsys_json_export.json",
        _bytes(
            b'{"type":"String","id":"3720","value":"Process 14944 was launched by the profiler"}\n'
            b'{"type":"ThreadName","globalTid":"72057844756653436","nameId":"14","priority":"10"}\n'
        ),
        error="one JSON object per line (JSON Lines), not a chrome trace: an `nsys export --type json` file?",
    ),
    # Twelve events of categories no Kineto writes (a future device, one event each): counted in the warning,
    # the first ten by name and the rest summed, so the line stays one short line whatever their number.
    Case(
        "chrome_many_unmodelled_categories.json",
        _chrome(
            lambda s: s.replace(
                '"traceEvents": [',
                '"traceEvents": ['
                + "".join(
                    f'{{"ph": "X", "cat": "future_dev_{i:02d}", "name": "x", "pid": 1, "tid": 1, "ts": 1.0, '
                    '"dur": 1.0}, '
                    for i in range(12)
                ),
                1,
            )
        ),
        warning="future_dev_08 1, future_dev_09 1 and 2 more (2 events)",
    ),
    Case(
        "chrome_only_metadata.json",
        _bytes(b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]}'),
        error="no profiler activity in traceEvents (1 events, none a kernel, cpu_op or CUDA API call): record with",
    ),
    Case("chrome_is_csv.json", _bytes(b'"ID","Process ID"\n"0","1"\n'), error="content looks like an ncu CSV"),
    Case("chrome_nan.json", _chrome(lambda s: s.replace('"dur": 7.136', '"dur": NaN', 1)), error="malformed"),
    Case(
        "chrome_huge_float.json", _chrome(lambda s: s.replace('"dur": 7.136', '"dur": 1e400', 1)), error="out of range"
    ),
    Case(
        "chrome_huge_int.json",
        _chrome(lambda s: s.replace('"correlation": 12,', '"correlation": 123456789012345678901234567890,', 1)),
        error="Expected `int` <= 9223372036854775807 - at `$.traceEvents[286].args.correlation`",
    ),
    Case(
        "chrome_kernel_without_ts.json",
        _chrome(lambda s: s.replace(_FIRST_KERNEL, '"dur": 7.136', 1)),
        warning="skipped 1 kernel events without ts",
    ),
    # The output checks, which chrome normalize counts over its tables in memory (checks.count_in).
    Case(
        "chrome_orphan_kernel.json",
        _chrome(lambda s: _after_first_kernel(s, '"correlation": 12,', '"correlation": 99999999,')),
        warning="1 kernels match no launching API call",
    ),
    Case(
        "chrome_negative_duration.json",
        _chrome(lambda s: s.replace(_FIRST_KERNEL, '"ts": 5357790672405.161, "dur": -7.136', 1)),
        warning="1 kernels end before they start",
    ),
]

NCU_CASES = [
    Case(
        "ncu_truncated.csv",
        _ncu(lambda lines, h: [*lines[:-1], lines[-1][: len(lines[-1]) // 2]]),
        error="cut off inside a quoted cell",
    ),
    Case(
        "ncu_missing_column.csv",
        _ncu(lambda lines, h: [*lines[:h], lines[h].replace('"Grid Size",', "", 1), *lines[h + 1 :]]),
        error="wrong number of cells",
    ),
    Case("ncu_other_tool.csv", _bytes(b"name,value\nfoo,1\n"), error="content is none of the known formats"),
    Case("ncu_empty.csv", _bytes(b""), error="file is empty"),
    # A live run without counter permission (as a public log has it): ncu's whole line, its URL included.
    Case(
        "ncu_no_counter_permission.csv",
        _bytes(
            b"==PROF== Connected to process 117320 (/usr/bin/python3.12)\n==ERROR== ERR_NVGPUCTRPERM - The user does"
            b" not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions"
            b" on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
            b"\nncu target script complete.\n==PROF== Disconnected from process 117320\n"
        ),
        error="to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM",
    ),
    # Profiler chatter and program output between the rows: skipped and counted, the rows all kept.
    Case(
        "ncu_chatter_between_rows.csv",
        _ncu(lambda lines, h: [*lines[: h + 5], "==PROF== Disconnected\n", "epoch 1 ok\n", *lines[h + 5 :]]),
        warning="skipped 6 non-CSV lines",
    ),
    # An extra column is one more metric: kept as such (ncu adds columns with every --metrics).
    Case("ncu_extra_column.csv", _ncu(_add_column), warning="skipped 4 non-CSV lines"),
]

CASES: list[Case] = [*NSYS_CASES, *CHROME_CASES, *NCU_CASES]


def build(case: Case, folder: Path) -> Path:
    path = folder / case.name
    case.make(path)
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bad_inputs")
    out.mkdir(parents=True, exist_ok=True)
    for c in CASES:
        print(build(c, out), "->", c.error or f"warning: {c.warning}")
