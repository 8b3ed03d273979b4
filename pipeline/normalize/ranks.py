"""Which rank, node-local rank and GPU a trace belongs to, for multi-GPU / multi-node captures.

A distributed job is profiled as one file per rank. The rank is read, most trusted first, from

1. the capture itself: the profiled process's environment as nsys records it in ``META_DATA_CAPTURE``
   (``RANK``/``LOCAL_RANK`` set by torchrun, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``SLURM_PROCID``...)
   or its command line (``--rank 3``, ``--local_rank=3``); a normalizer puts these in its meta dict;
2. the file's path: ``rank3/``, ``rank_3/``, ``run_rank3.sqlite``, ``rank-03.json`` (the last match wins,
   as the part nearest the file names it).

When both are known and disagree, the capture wins and a warning says so. ``device_id`` is the one CUDA
device all the trace's kernels ran on (as the process numbered it, i.e. after ``CUDA_VISIBLE_DEVICES``),
read from the kernels just written; NULL when they ran on several or there are none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pipeline.normalize.sqlite_reader import Sqlite
    from pipeline.store import TraceWriter

#: Environment variables naming the global rank, in the order they are trusted (a launcher's own first:
#: torchrun's RANK, then MPI's, then the batch system's, which under torchrun is the node's, not the rank's).
RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")
LOCAL_RANK_ENV = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
)
_ARG = re.compile(r"^--(local[_-]rank|rank)(?:=(\d+))?$")
# 'rank' not preceded by a letter (so not 'frank1'), an optional '_'/'-', digits not followed by a digit.
_PATH_RANK = re.compile(r"(?<![A-Za-z])rank[_-]?(\d+)(?!\d)", re.IGNORECASE)


def rank_from_path(path: Path | str) -> int | None:
    found = _PATH_RANK.findall(str(path))
    return int(found[-1]) if found else None


def _parse_env(entries: Iterable[str]) -> dict[str, str]:
    """``NAME="value"`` lines (nsys quotes values) -> {NAME: value}."""
    env = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if sep:
            env[name.strip()] = value.strip().strip('"')
    return env


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def ranks_from_env(env: dict[str, str]) -> tuple[int | None, int | None]:
    rank = next((r for r in (_int(env.get(k)) for k in RANK_ENV) if r is not None), None)
    local = next((r for r in (_int(env.get(k)) for k in LOCAL_RANK_ENV) if r is not None), None)
    return rank, local


def ranks_from_args(args: list[str]) -> tuple[int | None, int | None]:
    """``--rank 3`` / ``--rank=3`` / ``--local_rank=1`` / ``--local-rank 1`` on the profiled command line."""
    found: dict[str, int] = {}
    for i, arg in enumerate(args):
        m = _ARG.match(arg)
        if not m:
            continue
        value = m.group(2) if m.group(2) is not None else (args[i + 1] if i + 1 < len(args) else None)
        if _int(value) is not None:
            found.setdefault("local" if m.group(1) != "rank" else "rank", int(value))  # type: ignore[arg-type]
    return found.get("rank"), found.get("local")


def nsys_capture_ranks(db: Sqlite) -> dict[str, object]:
    """Rank hints from the environment and arguments nsys recorded for each profiled process."""
    table = "META_DATA_CAPTURE"
    if table not in db.tables:
        return {}
    rows = db.arrow(
        f"SELECT name, value FROM {table} WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE' "
        "OR name LIKE 'PROCESS_%:ARGUMENT_%' ORDER BY rowid"
    ).to_pylist()
    processes: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        proc, _, key = str(row["name"]).partition(":")
        kind = "env" if key == "ENVIRONMENT_VARIABLE" else "args"
        processes.setdefault(proc, {"env": [], "args": []})[kind].append(str(row["value"] or ""))
    found: set[tuple[int | None, int | None]] = set()
    for proc in processes.values():
        rank, local = ranks_from_env(_parse_env(proc["env"]))
        arg_rank, arg_local = ranks_from_args(proc["args"])
        found.add((rank if rank is not None else arg_rank, local if local is not None else arg_local))
    found.discard((None, None))
    if len(found) == 1:
        rank, local = found.pop()
        return {"rank": rank, "local_rank": local}
    if len(found) > 1:  # one capture of several ranks: no single rank to name
        return {"warnings": [f"capture holds processes of several ranks {sorted(found, key=str)}: rank left NULL"]}
    return {}


def single_device(writer: TraceWriter) -> int | None:
    for table in ("kernels", "ncu_kernels"):
        if writer.rows.get(table):
            ids = pc.unique(pq.read_table(writer.staged_file(table), columns=["device_id"]).column(0)).drop_null()
            return int(ids[0].as_py()) if len(ids) == 1 else None
    return None


def fill_rank(path: Path, meta: dict[str, object], writer: TraceWriter, warnings: list[str]) -> None:
    """Complete ``meta``'s rank, local_rank and device_id in place (see the module doc for the rules)."""
    from_path = rank_from_path(path)
    if meta.get("rank") is None:
        meta["rank"] = from_path
    elif from_path is not None and from_path != meta["rank"]:
        warnings.append(f"path says rank {from_path} but the capture says rank {meta['rank']}: kept the capture's")
    if meta.get("device_id") is None:
        meta["device_id"] = single_device(writer)
