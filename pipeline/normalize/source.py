"""Reading an input file whatever its wrapping: plain or gzip, checked before parsing."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pipeline.errors import BadInputError, SettingError, parse_size
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


def head(path: Path, n: int = 8192) -> bytes:
    """The first ``n`` bytes of the (decompressed) content, as UTF-8 when it is UTF-16 text (:func:`as_utf8`)."""
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as f:
                return as_utf8(f.read(n), prefix=True)
        with open(path, "rb") as f:
            return as_utf8(f.read(n), prefix=True)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInputError(path, f"cannot read: {e}") from e
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
        raise BadInputError(path, f"cannot decompress: {e}") from e


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
            raise BadInputError(path, f"cannot decompress: {e}") from e
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
