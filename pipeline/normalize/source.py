"""Reading an input file whatever its wrapping: plain or gzip, checked before parsing.

:func:`open_input` is the one step that opens an input for a normalizer: its format read from its content,
its size checked against the limit for formats read whole, and its sha256 started beside the normalizer.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pipeline.errors import BadInputError, SettingError, parse_size
from pipeline.normalize.ncu_pages import other_page
from pipeline.normalize.sha256 import sha256_of

__all__ = ["sha256_of"]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"

#: Inputs read whole into memory (chrome trace JSON, ncu CSV) are refused past this many (decompressed)
#: bytes: decoding takes ~1.8x the content (the 500 MB chrome benchmark peaked at 0.88 GB), so 1.5 GB keeps
#: a run under ~3 GB. Raise it with TRACEPIPE_MAX_INPUT_BYTES (e.g. ``=8GB``) on a machine with the memory.
DEFAULT_MAX_INPUT_BYTES = 1_500_000_000
MAX_INPUT_ENV = "TRACEPIPE_MAX_INPUT_BYTES"
#: Space left free on the temp file system when a gzip SQLite is decompressed there.
TEMP_RESERVE_BYTES = 256 << 20
#: Formats read whole into memory (the others are read in place: SQLite, or a memory map).
IN_MEMORY = ("chrome-trace", "ncu-csv", "layer-shapes", "compiled-kernels")


def max_input_bytes() -> int:
    raw = os.environ.get(MAX_INPUT_ENV)
    if raw is None:
        return DEFAULT_MAX_INPUT_BYTES
    n = parse_size(raw)
    if n is None or n <= 0:
        raise SettingError(f"{MAX_INPUT_ENV}={raw!r}: expected a positive size such as 1500000000 or 8GB")
    return n


def _too_big(limit: int) -> str:
    return (
        f"larger than {limit / 1e9:.2f} GB decompressed, the limit for inputs decoded in memory (about 1.8x "
        f"that in RAM): raise it with {MAX_INPUT_ENV}=<bytes, e.g. 8GB> where the memory allows"
    )


def check_plain_size(path: Path, fmt: str) -> None:
    """Refuse a plain in-memory-format file past the limit before reading it (gzip: see read_all)."""
    if fmt in IN_MEMORY and not is_gzip(path) and path.stat().st_size > (limit := max_input_bytes()):
        raise BadInputError(path, _too_big(limit))


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


#: Byte-order marks of UTF-16 text (Windows PowerShell 5's `>` writes UTF-16LE: `ncu --csv ... > out.csv`).
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def as_utf8(data: bytes, prefix: bool = False) -> bytes:
    """``data`` as UTF-8: UTF-16 text with a byte-order mark is re-encoded, anything else returned as it is.
    ``prefix``: ``data`` is a file's first bytes, whose last character may be cut (half a surrogate pair, say):
    dropped, where a whole file must decode."""
    if data[:2] in UTF16_BOMS:
        return data.decode("utf-16", errors="ignore" if prefix else "strict").encode("utf-8")
    return data


#: The first bytes of a file its format is told by (:func:`detect_format`).
HEAD_BYTES = 8192


def head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of the (decompressed) content, as UTF-8 when it is UTF-16 text (:func:`as_utf8`)."""
    gz = False
    try:
        if gz := is_gzip(path):
            with gzip.open(path, "rb") as f:
                return as_utf8(f.read(n), prefix=True)
        with open(path, "rb") as f:
            return as_utf8(f.read(n), prefix=True)
    except EOFError as e:  # a gzip cut within its first bytes, as read_all says of one cut later
        raise BadInputError(path, "gzip stream ends early (file truncated?)") from e
    except (OSError, zlib.error) as e:
        raise BadInputError(path, cannot_decompress(e) if gz else f"cannot read: {e}") from e
    except UnicodeDecodeError as e:
        raise BadInputError(path, f"UTF-16 text that does not decode: {e}") from e


@contextmanager
def open_binary(path: Path) -> Iterator[IO[bytes]]:
    """A binary stream of the content; gzip is undone on the fly."""
    f: IO[bytes] = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")  # noqa: SIM115
    try:
        yield f
    finally:
        f.close()


def side_file(path: Path, marker: str, versions: tuple[int, ...], kind: str) -> dict[str, Any]:
    """The JSON document of a side file tracepipe's capture wrote (``layer_shapes.json``, ``compiled_kernels.json``):
    an object holding ``marker`` with a version this tracepipe reads, else a BadInputError naming what it is not."""
    try:
        doc = json.loads(read_all(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInputError(path, f"not valid JSON ({e})") from e
    if not isinstance(doc, dict) or marker not in doc:
        raise BadInputError(path, f"not a tracepipe {kind} file (no {marker!r} key)")
    if doc[marker] not in versions:
        raise BadInputError(path, f"{kind} version {doc[marker]!r} is newer than this tracepipe reads")
    return doc


#: What a failed gzip read means, by the start of Python's message (gzip / zlib), with the fix.
GZIP_FAILURES = (
    ("Not a gzipped file", "bytes that are not gzip follow its gzip stream (appended to?): copy the file again"),
    ("CRC check failed", "its gzip data is corrupt (CRC check failed): copy the file again"),
    ("Incorrect length of data produced", "its gzip data is corrupt (wrong length): copy the file again"),
)


def cannot_decompress(e: Exception) -> str:
    """The reason a gzip input failed to decompress, with the fix where Python's message says which damage it is."""
    said = str(e)
    return next((fix for start, fix in GZIP_FAILURES if said.startswith(start)), f"cannot decompress: {said}")


def read_all(path: Path) -> bytes:
    """The whole decompressed content, with a clear error for a gzip cut mid-stream; refused past
    :func:`max_input_bytes` (a gzip bomb stops there, never decompressed whole)."""
    limit = max_input_bytes()
    try:
        with open_binary(path) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise BadInputError(path, _too_big(limit))
        return as_utf8(data)
    except UnicodeDecodeError as e:
        raise BadInputError(path, f"UTF-16 text that does not decode: {e}") from e
    except EOFError as e:
        raise BadInputError(path, "gzip stream ends early (file truncated?)") from e
    except (OSError, zlib.error) as e:
        raise BadInputError(path, cannot_decompress(e)) from e


def sqlite_size(header: bytes) -> int | None:
    """The database size an SQLite header states (page size x page count), when the header vouches for it
    (its version-valid-for number equals its change counter; sqlite.org/fileformat.html#in_header_database_size)."""
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC) or header[92:96] != header[24:28]:
        return None
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    return page * int.from_bytes(header[28:32], "big") or None


@contextmanager
def local_file(path: Path, suffix: str) -> Iterator[Path]:
    """A plain file with the content, for readers that need a real path (sqlite).

    A gzip is decompressed into a private temp folder only after its first bytes are checked, with the
    size its SQLite header states checked against the free space first, and the copy stopped if it grows
    past that size or the free space runs low (a bomb is refused, not written out).
    """
    if not is_gzip(path):
        yield path
        return
    first = head(path, 100)
    expected = sqlite_size(first) if first.startswith(SQLITE_MAGIC) else None
    with tempfile.TemporaryDirectory(prefix="tracepipe-") as tmp:
        free = shutil.disk_usage(tmp).free - TEMP_RESERVE_BYTES
        if expected is not None and expected > free:
            raise BadInputError(path, _no_space(expected, tmp))
        cap = expected + (64 << 10) if expected is not None else None  # a little slack: a WAL-less tail
        plain = Path(tmp) / f"input{suffix}"
        written = 0
        try:
            with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if cap is not None and written > cap:
                        raise BadInputError(path, f"decompresses past the {expected} bytes its SQLite header states")
                    if written % (256 << 20) < len(chunk) and shutil.disk_usage(tmp).free < TEMP_RESERVE_BYTES:
                        raise BadInputError(path, _no_space(written, tmp))
                    dst.write(chunk)
        except EOFError as e:
            raise BadInputError(path, "gzip stream ends early (file truncated?)") from e
        except (OSError, zlib.error) as e:
            if isinstance(e, OSError) and e.errno == 28:  # ENOSPC
                raise BadInputError(path, _no_space(written, tmp)) from e
            raise BadInputError(path, cannot_decompress(e)) from e
        yield plain


def _no_space(need: int, tmp: str) -> str:
    return (
        f"needs {need / 1e9:.2f} GB decompressed in {Path(tmp).parent}, which has too little free space: "
        "set TMPDIR to a folder with room, or decompress it yourself (gunzip) and pass the .sqlite"
    )


class Sha256Job:
    """``sha256_of(path)`` computed in a child process from the moment this is made.

    A process, not a thread: a normalizer may fork workers, and a fork while another thread runs may copy
    a lock held by that thread (Python 3.12+ warns that this can deadlock).  The child is started by
    ``subprocess`` (fork + exec at once, safe) before the normalizer starts anything, and hashes while the
    normalizer works; ``result()`` waits for it.  The chrome normalizer, which forks, hashes in a thread of
    its own started after its fork instead (``chrome_decode._Digest``), sparing this child's start.
    """

    def __init__(self, path: Path) -> None:
        # Run as a script: the child imports hashlib and mmap only, not this package (pyarrow and all).
        script = Path(__file__).with_name("sha256.py")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(script), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.path = path

    def result(self) -> str:
        out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            raise BadInputError(self.path, f"cannot read to hash it: {err.decode(errors='replace').strip()}")
        return out.decode().strip()

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


# --- opening an input ------------------------------------------------------------------------------------


#: What a file's name promises, checked against what its content is.
_BY_NAME = {".sqlite": "nsys-sqlite", ".json": "chrome-trace", ".csv": "ncu-csv"}
_WHAT = {
    "nsys-sqlite": "an SQLite database",
    "chrome-trace": "a JSON chrome trace",
    "ncu-csv": "an ncu CSV",
    "layer-shapes": "a tracepipe layer_shapes file",
    "compiled-kernels": "a tracepipe compiled_kernels file",
}
#: Content formats that keep a name's promise of another (a capture's layer_shapes.json is JSON too).
_ALSO = {"layer-shapes": "chrome-trace", "compiled-kernels": "chrome-trace"}


def _by_content(first: bytes) -> str | None:
    if first.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    text = first.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"{" and b'"tracepipe_layers"' in text[:64]:  # tracepipe capture's side file: its first key
        return "layer-shapes"
    if text[:1] == b"{" and b'"tracepipe_compiled"' in text[:64]:  # its compiled-kernels side file, likewise
        return "compiled-kernels"
    if text[:1] in (b"{", b"["):
        return "chrome-trace"
    if b'"ID","Process ID"' in first or first.startswith(b"==") or b"\n==PROF==" in first or other_page(text):
        return "ncu-csv"  # other_page: ncu's session/source pages, refused by the ncu normalizer with the fix
    return None


#: Files a user may take for traces, by their first bytes (after gzip is undone): (offset, bytes there; offset None:
#: anywhere in the first 512) -> what the file is and what to do. Archives first: a trace is often shipped zipped
#: or tarred (HTA's own test data holds a .tar.gz of Kineto traces).
OTHER_FILES: dict[tuple[int | None, bytes], str] = {
    (0, b"PK\x03\x04"): "a ZIP archive (an .xlsx workbook is one); unzip it and pass the trace files inside",
    (257, b"ustar"): "a tar archive; unpack it (tar -xf) and pass its trace files or their folder",
    (0, b"\xfd7zXZ\x00"): "an xz archive; decompress it (xz -d) and pass the file (gzip is read as it is)",
    (0, b"\x28\xb5\x2f\xfd"): "a zstd archive; decompress it (zstd -d) and pass the file (gzip is read as it is)",
    (0, b"BZh91AY&SY"): "a bzip2 archive; decompress it (bunzip2) and pass the file (gzip is read as it is)",
    (None, b"<session version="): "an NVIDIA Visual Profiler session (.nvvp XML: settings, no profile data; nvprof's "
    "own database is not read either)",
}


#: Other profilers' files without a signature of their own (protobuf), by name: ending -> what the file is.
OTHER_NAMES: dict[str, str] = {
    ".xplane.pb": "a TensorFlow/JAX profiler XPlane (protobuf), not read; profile a PyTorch model with torch.profiler",
    ".pftrace": "a Perfetto trace (protobuf), not read; tracepipe reads a PyTorch profiler's chrome trace JSON",
    ".perfetto-trace": "a Perfetto trace (protobuf), not read; tracepipe reads a PyTorch profiler's chrome trace JSON",
}


def _other_file(first: bytes, name: str) -> str | None:
    """What a file matching no format is, by its first bytes (OTHER_FILES) or its name (OTHER_NAMES), or None."""
    for (at, sign), what in OTHER_FILES.items():
        if (sign in first[:512]) if at is None else first[at : at + len(sign)] == sign:
            return what
    return next((what for end, what in OTHER_NAMES.items() if name.endswith(end)), None)


#: ncu's CSV table or log lines, looked for past a text file's first bytes (:func:`_ncu_past_head`).
NCU_MARKERS = (b'"ID","Process ID"', b"\n==PROF==", b"\n==ERROR==", b"\n==WARNING==")
#: Bytes read at a time in that search; each chunk keeps the tail of the one before, so a marker cut between
#: two is found.
SEARCH_CHUNK = 1 << 20


def _ncu_past_head(path: Path) -> bool:
    """Whether a text file whose first bytes match no format holds ncu's table or log lines further on: `ncu --csv
    > FILE` puts the profiled program's own output first, however long (a printed tensor of 8 KB in a real export,
    2021). Read up to the size limit for formats read whole, which the ncu reader would read anyway."""
    limit = max_input_bytes()
    keep = max(map(len, NCU_MARKERS))
    try:
        with open_binary(path) as f:
            if f.read(2) in UTF16_BOMS:  # re-encoded whole, as the reader does
                return any(m in head(path, limit) for m in NCU_MARKERS)
            tail, seen = b"", 0
            while seen < limit and (chunk := f.read(SEARCH_CHUNK)):
                if any(m in tail + chunk for m in NCU_MARKERS):
                    return True
                tail, seen = chunk[-keep:], seen + len(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInputError(path, f"cannot read: {e}") from e
    return False


def detect_format(path: Path) -> str:
    """The source format of ``path``, from its first bytes; BadInputError if none fits or the name disagrees."""
    if not path.is_file():
        if path.exists() and not path.is_dir():  # read once for its format, again to parse: a file, not a stream
            raise BadInputError(path, "not a regular file (a pipe, a device or a socket): give the trace file itself")
        raise BadInputError(path, "no such file")
    if path.stat().st_size == 0:
        raise BadInputError(path, "file is empty")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".nsys-rep", ".qdrep", ".qdstrm")):  # nsys's own binary, read by its CLI: its bytes as they are
        try:  # (a report is no gzip; one that does not decompress is nsys's to refuse)
            with open(path, "rb") as f:
                found = _by_content(f.read(HEAD_BYTES))
        except OSError as e:
            raise BadInputError(path, f"cannot read: {e}") from e
        if found is not None:  # an export or a trace renamed: no nsys would read it
            raise BadInputError(
                path,
                f"named like an nsys report but its content looks like {_WHAT[found]}: give it its own extension "
                "(.sqlite, .json, .csv)",
            )
        return "nsys-rep"
    first = head(path)
    if not first:
        raise BadInputError(path, "file is empty (after decompression)")
    found = _by_content(first)
    if found is None and b"\x00" not in first:  # text: ncu's table may come after its first bytes
        found = "ncu-csv" if _ncu_past_head(path) else None
    other = _other_file(first, name) if not found else None
    promised = next((fmt for ext, fmt in _BY_NAME.items() if name.endswith(ext)), None)
    if promised and found != promised and _ALSO.get(found) != promised:
        content = f"its content looks like {_WHAT[found]}" if found else "its content is none of the known formats"
        raise BadInputError(path, f"named like {_WHAT[promised]} but {f'it is {other}' if other else content}")
    if found is None:
        what = f"it is {other}; " if other else ""
        raise BadInputError(
            path, f"unrecognised format: {what}expected nsys .sqlite/.nsys-rep, chrome trace JSON or ncu CSV"
        )
    return found


#: Formats whose normalizer returns the input's sha256 in its meta (chrome: a thread beside its decode).
SELF_HASHED = frozenset({"chrome-trace"})


@dataclass
class Input:
    """An input opened for its normalizer: the format its content has, its size already checked, and its sha256
    being hashed in a child process while the normalizer runs (``digest``; None where the normalizer hashes
    the file itself while it reads it, :data:`SELF_HASHED`)."""

    path: Path
    format: str
    digest: Sha256Job | None

    def sha256(self, meta: dict[str, object]) -> str:
        """The file's sha256: the child's, or the one the normalizer put in its ``meta`` (taken out of it)."""
        return str(meta.pop("source_sha256")) if self.digest is None else self.digest.result()

    def close(self) -> None:
        """Stop the child hashing the file, if it still runs (a failed normalize needs no digest)."""
        if self.digest is not None:
            self.digest.cancel()


def open_input(path: Path) -> Input:
    """``path`` opened for its normalizer: its format (:func:`detect_format`), its size checked
    (:func:`check_plain_size`), its sha256 started (:class:`Sha256Job`); BadInputError when any check fails.
    Close it (:meth:`Input.close`) when the normalizer is done."""
    fmt = detect_format(path)
    check_plain_size(path, fmt)
    return Input(path, fmt, None if fmt in SELF_HASHED else Sha256Job(path))
