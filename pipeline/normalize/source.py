"""Reading an input file whatever its wrapping: plain or gzip, checked before parsing."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pipeline.errors import BadInputError
from pipeline.normalize.sha256 import sha256_of

__all__ = ["sha256_of"]

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


class Sha256Job:
    """``sha256_of(path)`` computed in a child process from the moment this is made.

    A process, not a thread: the chrome normalizer forks decode workers, and a fork while another thread
    runs may copy a lock held by that thread (Python 3.12+ warns that this can deadlock).  The child is
    started by ``subprocess`` (fork + exec at once, safe) before the normalizer starts anything, and hashes
    while the normalizer works; ``result()`` waits for it.
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
