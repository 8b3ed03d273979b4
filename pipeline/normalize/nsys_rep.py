"""A ``.nsys-rep`` report: converted to a temporary ``.sqlite`` by the nsys CLI (``nsys.find_nsys``), then read
as an export (``nsys.normalize_sqlite``)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import BadInputError
from pipeline.normalize import nsys
from pipeline.store import TraceWriter

LIBDW_HINT = " (the importer needs libdw.so.1 and libelf.so.1 on LD_LIBRARY_PATH: see docs/capture.md)"


@contextmanager
def exported_sqlite(rep: Path) -> Iterator[Path]:
    """Convert a ``.nsys-rep`` to a temporary ``.sqlite`` with the nsys CLI."""
    nsys_cli = nsys.find_nsys()  # looked up on the module: a test replaces it
    if nsys_cli is None:
        raise BadInputError(
            rep,
            f"a {'.qdrep' if rep.name.lower().endswith('.qdrep') else '.nsys-rep'} report needs the nsys CLI to "
            "convert it (not found on PATH); "
            "run `nsys export --type sqlite` on the capture host and normalize the .sqlite",
        )
    with tempfile.TemporaryDirectory(prefix="tracepipe-nsys-") as tmp:
        out = Path(tmp) / "export.sqlite"
        proc = subprocess.run(
            [nsys_cli, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            hint = LIBDW_HINT if "libdw" in proc.stderr else ""
            raise BadInputError(rep, f"nsys export failed{hint}: {msg[-1] if msg else proc.returncode}")
        yield out


def normalize_rep(path: Path, writer: TraceWriter) -> dict[str, object]:
    with exported_sqlite(path) as sqlite:
        meta = nsys.normalize_sqlite(sqlite, writer, shown=path)
    meta["source_format"] = "nsys-rep"
    return meta
