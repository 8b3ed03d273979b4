"""The sha256 of a file; run as a script by ``source.Sha256Job`` (stdlib only, so the child starts fast)."""

from __future__ import annotations

import hashlib
import mmap
import sys
from pathlib import Path


def sha256_of(path: Path | str) -> str:
    """Hashed from a memory map where the file can be mapped (no copy out of the page cache: ~10% less CPU
    than reading it in chunks), else read through ``hashlib.file_digest``."""
    with open(path, "rb") as f:
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return hashlib.sha256(mapped).hexdigest()
        except (OSError, ValueError):  # empty, or not mappable (a pipe, some network file systems)
            f.seek(0)
            return hashlib.file_digest(f, "sha256").hexdigest()


if __name__ == "__main__":
    print(sha256_of(sys.argv[1]))
