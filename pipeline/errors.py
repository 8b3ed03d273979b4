"""Errors a user can act on: each names the file and what was wrong with it."""

from __future__ import annotations

import errno
import re
from pathlib import Path

#: Exit codes of every ``tracepipe`` command (documented in ``--help`` and README).
EXIT_OK = 0
EXIT_FAILED = 1  # a bug of tracepipe: please report
EXIT_BAD_INPUT = 2  # bad input or setting, no space, no permission: the message names the file and the fix
EXIT_WORKER_DIED = 3  # a --jobs worker was killed (e.g. by the OOM killer); the other inputs were done


class BadInputError(Exception):
    """An input file that cannot be read as the format it claims to be."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class OutputError(Exception):
    """A result that cannot be written where asked (inside the normalized data, no such folder, a full disk):
    the message names the file and the fix. Exit 2, like bad input."""


class SettingError(Exception):
    """A setting (environment variable or option value) tracepipe cannot use; the message names it and
    what it expects. Exit 2, like bad input."""


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int | None:
    """Bytes of a size such as ``3GB``, ``512 MiB`` or ``1500000000``; None when it is not one."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*", text, re.IGNORECASE)
    if m is None:
        return None
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])


#: OS errors the user can fix, with the fix.
_OS_FIXES = {
    errno.ENOSPC: "no space left on the device: free space, or write elsewhere (--out, TMPDIR)",
    errno.EDQUOT: "disk quota exceeded: free space, or write elsewhere (--out, TMPDIR)",
    errno.EACCES: "permission denied: check the file's and folder's permissions, or write elsewhere (--out)",
    errno.EPERM: "operation not permitted: check the file's and folder's permissions, or write elsewhere",
    errno.EROFS: "read-only file system: write elsewhere (--out, TMPDIR)",
    errno.EFBIG: "file too large for the file system or the file-size limit (ulimit -f): write elsewhere (--out)",
    errno.ENAMETOOLONG: "file name too long: use a shorter --out or --trace-id",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n) or use fewer --jobs",
}


def os_error_fix(code: int) -> str | None:
    """What went wrong and the fix, for an OS error number a user can fix (no space, no permission...);
    None for any other."""
    return _OS_FIXES.get(code)


def os_error_reason(e: OSError) -> str | None:
    """One line naming the file and the fix for an OS error a user can fix; None for any other."""
    fix = os_error_fix(e.errno) if e.errno is not None else None
    if fix is None:
        return None
    where = e.filename if e.filename is not None else "a file"
    return f"{where}: {fix}"


#: DuckDB's errors for a Parquet file of a tracepipe folder that is not whole, each pattern naming the file: cut
#: short (a disk that filled, a copy stopped), overwritten or removed by hand. Messages of DuckDB 1.1 to 2.0.
DAMAGED_PARQUET_MESSAGES = (
    re.compile(r"No magic bytes found at end of file '(?P<path>[^']+)'"),
    re.compile(r"File '(?P<path>[^']+)' too small to be a Parquet file"),
    re.compile(r'No files found that match the pattern "(?P<path>[^"*?\[]+)"'),  # one file, not a glob
)


def damaged_file(path: Path, detail: str = "") -> BadInputError:
    """A Parquet file of a tracepipe folder that is not whole, as bad input naming it and the command that writes it
    again (``detail``: the reader's own words, in parentheses)."""
    if ".tracepipe" in path.parts:  # a normalized folder's copy of a trace
        fix = "normalize that trace again into the folder (tracepipe normalize SOURCE --out FOLDER --force)"
    else:
        fix = "write it again (tracepipe analyze, for a view's file)"
    said = f" ({detail})" if detail else ""
    return BadInputError(path, f"not a whole Parquet file (cut short, overwritten or removed){said}: {fix}")


def damaged_parquet(e: Exception) -> BadInputError | None:
    """A DuckDB error about a damaged or missing Parquet file, as :func:`damaged_file`; None for any other error."""
    for pattern in DAMAGED_PARQUET_MESSAGES:
        if m := pattern.search(str(e)):
            return damaged_file(Path(m["path"]))
    return None
