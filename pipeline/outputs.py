"""Where a command may write its results, and a write the disk refuses as one line naming the file.

Every result tracepipe writes goes through here: an output folder (``analyze --out``, ``report --out``,
``diff --out``, ``run``'s analysis) is made by :func:`output_folder`, an output file (``sql -o``, the shell's
``.output``, ``export perfetto -o``) is checked by :func:`check_new_file`, and both refuse any place inside
a normalized folder: plain globs read every Parquet file under ``<table>/trace_id=*/`` as that table, so a
``layer_diff.parquet`` in a ``kernels`` partition would be read as kernels, and an export named like a public
part would replace it.  Only ``normalize`` (through :mod:`pipeline.store`) writes there.

:func:`writing` turns a full disk, a quota, a read-only file system, a permission or the file-size limit met
while writing a result, whether Python, pyarrow or DuckDB's own writer meets it, into an :class:`OutputError`
naming the result's file and the fix: exit 2, as bad input, never a bug's exit 1.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import OutputError, os_error_fix
from pipeline.store import STATE


def is_normalized(folder: Path) -> bool:
    """Whether ``folder`` holds normalized data: the store's state folder (``.tracepipe/``, made by its first
    writer) or the public ``trace_meta`` table of a store from before generations."""
    return (folder / STATE).is_dir() or (folder / "trace_meta").is_dir()


def wrong_folder(folder: Path, wanted: str) -> str | None:
    """What ``folder`` is when a command that reads ``wanted`` (``"analysis"``, ``"normalized"`` or ``"either"``) was
    given it and it is not that, with the fix; None when there is nothing more to say than the command's own text.
    Cases users met: a path that does not exist, a trace file, the folder ``tracepipe run --out`` wrote (which
    holds ``normalized/`` and ``analysis/``)."""
    folder = Path(folder)
    if not folder.exists():
        return "no such folder"
    if not folder.is_dir():
        return "a file, not a folder: give an --out folder of tracepipe (a trace file: `tracepipe run FILE` first)"
    inside = [name for name in ("analysis", "normalized") if (folder / name).is_dir()]
    if wanted != "either":
        inside = [name for name in inside if name == wanted]
    if inside:
        listed = " or ".join(str(folder / name) for name in inside)
        return f"the folder `tracepipe run` wrote: give {listed}"
    return None


def normalized_folder_holding(path: Path) -> Path | None:
    """The normalized folder ``path`` is, or lies inside (links resolved), if any."""
    target = Path(path).expanduser().resolve()
    return next((f for f in (target, *target.parents) if is_normalized(f)), None)


def refuse_inside_normalized(path: Path) -> Path:
    """``path``, unless it is or lies inside a normalized folder: then OutputError, before anything is written."""
    folder = normalized_folder_holding(path)
    if folder is not None:
        where = "the" if folder == Path(path).expanduser().resolve() else "inside the"
        raise OutputError(
            f"cannot write {path}: it is {where} normalized data {folder}, whose files tools read as trace "
            "tables; write elsewhere (-o / --out)"
        )
    return path


def output_folder(out: Path) -> Path:
    """``out`` made (with its parents) to hold a command's results, after :func:`refuse_inside_normalized`."""
    refuse_inside_normalized(out)
    return made_folder(out)


def made_folder(out: Path) -> Path:
    """``out`` made (with its parents) as a folder; OutputError (exit 2) when it, or a folder above it, is a file
    (``run --out FILE`` was NotADirectoryError, exit 1)."""
    above = next((p for p in (out, *out.parents) if p.exists()), None)
    if above is not None and not above.is_dir():
        raise OutputError(f"cannot write into {out}: {above} is a file; give a folder (--out)")
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
    return out


def file_to_replace(path: Path) -> Path:
    """The file a result written to ``path`` replaces (written beside it, then renamed over it): the file a symlink
    points to (as a shell's ``>`` writes through the link; renaming over the link would turn it into a plain
    file), or ``path`` itself. A pipe, a device or a socket there is refused: renaming over it would replace it
    (as root, ``-o /dev/full`` replaced the device)."""
    target = path.resolve() if path.is_symlink() else path
    if target.exists() and not (target.is_file() or target.is_dir()):  # a folder: each caller names it
        raise OutputError(f"cannot write {path}: not a regular file (a pipe, a device or a socket); give a file name")
    return target


def check_new_file(output: Path, protected: Path | None = None, overwrite: bool = True) -> Path:
    """``output`` made absolute once it is safe to write: its folder exists, it is not a folder, it is not
    inside normalized data (:func:`refuse_inside_normalized`; ``protected``, the folder a command reads, is
    named when the file is inside it) and, without ``overwrite``, it does not exist yet."""
    target = file_to_replace(output.expanduser().absolute())
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {output}: no folder {target.parent} (create it first)")
    if target.is_dir():
        raise OutputError(f"cannot write {output}: it is a folder; give a file name")
    if protected is not None and target.resolve().is_relative_to(protected.resolve()):
        raise OutputError(f"cannot write {output}: it is inside the normalized data {protected}")
    refuse_inside_normalized(target)
    if not overwrite and target.exists():
        raise OutputError(f"{output} exists; give a new file name (the shell never overwrites)")
    return target


#: DuckDB's IO errors carry the OS error number (``"errno":"28"``), else its text (``No space left on device``).
_DUCKDB_ERRNO = re.compile(r'"errno"\s*:\s*"(\d+)"')


def error_number(e: BaseException) -> int | None:
    """The OS error number behind a failed write: an OSError's own (pyarrow's too), or the one DuckDB's
    IOException reports in its message."""
    if isinstance(e, OSError):
        return e.errno
    if type(e).__name__ != "IOException":  # duckdb.IOException, without importing DuckDB for the test
        return None
    text = str(e)
    if m := _DUCKDB_ERRNO.search(text):
        return int(m.group(1))
    return next((code for code in range(1, 200) if os_error_fix(code) and os.strerror(code) in text), None)


#: The file an error names: an OSError's own, or the one DuckDB's IOException could not open.
_DUCKDB_FILE = re.compile(r'Cannot open file "(?P<path>[^"]+)"')
#: No such file or folder, for a file created beside ``path`` or ``path`` itself (its folder exists: checked first):
#: a place that takes no new file (/proc), or a folder removed meanwhile. Only there: an input gone is not this.
_CREATE_REFUSED = "no file can be created there (a place such as /proc, or a folder removed meanwhile): write elsewhere"


def _failed_file(e: BaseException) -> Path | None:
    if isinstance(e, OSError):
        return Path(e.filename) if e.filename is not None else None
    m = _DUCKDB_FILE.search(str(e))
    return Path(m["path"]) if m else None


def _creation_refused(e: BaseException, path: Path) -> bool:
    """Whether ``e`` is "no such file or folder" for ``path`` or a file beside it (its temp file)."""
    failed = _failed_file(e)
    if failed is None or not (error_number(e) == errno.ENOENT or "No such file or directory" in str(e)):
        return False
    return failed.absolute() == path.absolute() or failed.absolute().parent == path.absolute().parent


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Around the writing of ``path`` (through any temp file beside it): an OS refusal a user can fix becomes
    OutputError naming ``path`` and the fix; anything else passes unchanged."""
    try:
        yield
    except OutputError:
        raise
    except Exception as e:
        code = error_number(e)
        fix = os_error_fix(code) if code is not None else None
        if fix is None and _creation_refused(e, Path(path)):
            fix = _CREATE_REFUSED
        if fix is None:
            raise
        raise OutputError(f"{path}: {fix}") from e


#: The Parquet key-value metadata key of a view's file: the inputs it was computed over (:func:`inputs_stamp`), so a
#: reader of several views can tell a folder whose views come from different inputs (an analyze killed midway after
#: a trace was added, or one of other traces into the same folder) from one whose views were added later.
INPUTS_KEY = "tracepipe_inputs"


def inputs_stamp(generations: dict[str, str | None], device: str | None) -> str:
    """What the views of an analysis were computed over, as hex: each trace's committed generation (a re-normalized
    trace gets a new one) and the projected device."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps([sorted(generations.items()), device]).encode()).hexdigest()[:32]


def file_stamp(path: Path) -> str | None:
    """A view file's :data:`INPUTS_KEY` (None: written without one, by an older tracepipe or incremental analyze, or
    not readable: its reader says so)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path).metadata or {}
    except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
        return None
    value = meta.get(INPUTS_KEY.encode())
    return value.decode() if value is not None else None


def mixed_inputs(folder: Path) -> str | None:
    """What is wrong with an analysis folder whose view files were computed over different inputs (their
    ``outputs.INPUTS_KEY``): an analyze stopped midway after a trace was added or re-normalized, or one over other
    traces into the same folder. The views would disagree on the traces (a trace's kernels without its layers).
    None when they agree; views written later over the same inputs (``--view kernel_sm_load``) agree."""
    stamps: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.parquet")):
        if not path.name.startswith(".") and (stamp := file_stamp(path)) is not None:  # not a killed run's scratch
            stamps.setdefault(stamp, []).append(path.name)
    if len(stamps) < 2:
        return None
    common, *others = sorted(stamps.values(), key=len, reverse=True)
    return (
        f"its views were computed over different traces ({others[0][0]} is not over the inputs of {common[0]} and "
        f"{len(common) - 1} more): an analyze stopped midway, or one of other traces wrote here; run `tracepipe "
        "analyze` again into this folder"
    )
