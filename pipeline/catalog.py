"""What a normalized folder offers a query: every table and view by name, with a one-line description each.

The descriptions are read from where each name is defined -- the header comment of ``sql/<view>.sql``, the
``DESCRIPTIONS`` of ``pipeline/schema.py``, the docstring of a Python-made table -- so ``--help``, the shell's
``.tables`` and the Python API cannot drift from the code.  No DuckDB import here: ``--help`` stays quick.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path


def _sql_dir() -> Path:
    """The views: an installed tracepipe carries the top-level sql/ as package data of ``pipeline.views``
    (pyproject.toml maps it there); a checkout run without installing reads sql/ beside pipeline/."""
    try:
        spec = importlib.util.find_spec("pipeline.views")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[1] / "sql"


SQL_DIR = _sql_dir()

#: The small lookup tables kept in Python, each registered on every connection as a view of this name:
#: view name -> "module:function" returning a pyarrow Table (imported only when a connection or a listing asks).
PY_TABLES: dict[str, str] = {
    "arch_limits": "pipeline.analyze.arch:arch_limits_table",
    "gpu_names": "pipeline.analyze.arch:gpu_names_table",
    "kernel_tile_patterns": "pipeline.analyze.tiles:tile_patterns_table",
    "ncu_display_names": "pipeline.analyze.ncu_names:display_names_table",
    "layer_hints": "pipeline.layer_hints:layer_hints_table",
    "aten_op_names": "pipeline.analyze.fused_ops:op_names_table",
    "inductor_kernel_kinds": "pipeline.analyze.fused_ops:kernel_kinds_table",
    "finding_thresholds": "pipeline.analyze.finding_rules:finding_thresholds_table",
    "finding_kernel_classes": "pipeline.analyze.finding_rules:finding_kernel_classes_table",
    "device_override": "pipeline.analyze.arch:device_override_table",  # replaced by connect(device=...)
}

#: Prefixes of the names Python registers behind the public views (pyarrow datasets, empty tables, ...).
INTERNAL_PREFIXES = ("_",)

#: A header line that starts the next part of a view's header (``-- Inputs: ...``, ``-- Output: ...``).
_LABEL = re.compile(r"^[A-Za-z][\w ]*:\s")


def view_description(path: Path) -> str:
    """The first sentence of a view file's header: ``-- name: <this>`` plus its continuation lines."""
    words: list[str] = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.startswith("--"):
            break
        text = line[2:].strip()
        if i == 0:
            name, _, text = text.partition(":")
            if name.strip() != path.stem:
                return ""
        elif not text or _LABEL.match(text):
            break
        words.append(text)
    joined = re.sub(r"\s+", " ", " ".join(words)).strip()
    first = re.split(r"(?<!e\.g)(?<!i\.e)\.(?:\s|$)", joined, maxsplit=1)[0]  # the first sentence
    return first.rstrip(".")


def view_descriptions(sql_dir: Path = SQL_DIR) -> dict[str, str]:
    """The public views (a private one, ``_name``, is a stage of another: no user's entry point)."""
    return {p.stem: view_description(p) for p in sorted(sql_dir.glob("*.sql")) if is_public(p.stem)}


def table_descriptions() -> dict[str, str]:
    """Normalized tables (schema.py) and the small tables Python registers (first docstring line)."""
    from pipeline.schema import DESCRIPTIONS

    out = dict(DESCRIPTIONS)
    for name, target in PY_TABLES.items():
        module, func = target.split(":")
        doc = getattr(importlib.import_module(module), func).__doc__ or ""
        out[name] = doc.strip().splitlines()[0].rstrip(".") if doc.strip() else ""
    return out


def descriptions(sql_dir: Path = SQL_DIR) -> dict[str, str]:
    """Every public name a connection has: tables first, then views."""
    return {**table_descriptions(), **view_descriptions(sql_dir)}


def is_public(name: str) -> bool:
    return not name.startswith(INTERNAL_PREFIXES)
