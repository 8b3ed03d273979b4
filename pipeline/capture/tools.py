"""What the capture needs from the machine: the profilers (nsys, ncu, nsys's importer), the libraries nsys's
importer loads, and a GPU; probed before any folder is made, so a CPU box answers in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

LIBDW = "libdw.so.1"
LIBDW_HINT = (
    "nsys's importer (QdstrmImporter) needs libdw.so.1, which this host lacks: unpack Debian's libdw1 and "
    "libelf1 packages with `dpkg -x libdw1_*.deb D; dpkg -x libelf1_*.deb D` and pass "
    "--lib-dir D/usr/lib/x86_64-linux-gnu (or put it on LD_LIBRARY_PATH), then capture again"
)


def has_library(name: str, env: dict[str, str]) -> bool:
    """Whether the dynamic loader would find ``name``: LD_LIBRARY_PATH first, then the ldconfig cache."""
    for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d and (Path(d) / name).exists():
            return True
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        cache = ""
    if name in cache:
        return True
    return any((Path(d) / name).exists() for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"))


def find_tool(name: str) -> str | None:
    if name == "nsys":
        try:
            from pipeline.normalize.nsys import find_nsys  # one rule for where nsys lives
        except ImportError:  # the GPU host may lack the normalizer's deps (adbc); same search, inline
            find_nsys = None
        if find_nsys is not None:
            return find_nsys()
    found = shutil.which(name)
    if found:
        return found
    pattern = "**/target-linux-x64/nsys" if name == "nsys" else f"**/{name}"
    for root in (Path("/opt/nvidia"), Path("/usr/local/cuda")):
        for cand in sorted(root.glob(pattern), reverse=True) if root.is_dir() else []:
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


def find_importer(nsys: str) -> str | None:
    """QdstrmImporter beside nsys (``.../target-linux-x64/nsys`` -> ``.../host-linux-x64/QdstrmImporter``)."""
    base = Path(nsys).resolve().parent
    for cand in (base / "QdstrmImporter", *sorted(base.parent.glob("*/QdstrmImporter"))):
        if cand.is_file():
            return str(cand)
    return None


#: Where the NVIDIA driver lists the GPUs it drives (one folder per GPU), and its CLI.
NVIDIA_PROC_GPUS = Path("/proc/driver/nvidia/gpus")


def gpu_count() -> int:
    """GPUs the NVIDIA driver sees: its /proc listing, else ``nvidia-smi -L``; 0 without a driver."""
    if NVIDIA_PROC_GPUS.is_dir():
        return sum(1 for _ in NVIDIA_PROC_GPUS.iterdir())
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def preflight(command: str, steps: list[str], device: str) -> str | None:
    """What this machine lacks for the capture, in one line (None when nothing): checked before any
    folder is made or model run, so a CPU box answers in a second instead of a traceback."""
    missing = []
    # nsys and ncu record GPU work whatever device the model is on; torch needs a GPU only for cuda
    needs_gpu = device.startswith("cuda") or any(s in ("nsys", "ncu") for s in steps)
    if needs_gpu and gpu_count() == 0:
        missing.append(f"an NVIDIA GPU (none found: no {NVIDIA_PROC_GPUS}, nvidia-smi lists none)")
    if len(steps) == 1 and steps[0] in ("nsys", "ncu") and find_tool(steps[0]) is None:
        missing.append(f"{steps[0]} (not on PATH nor under /opt/nvidia or /usr/local/cuda)")
    if not missing:
        return None
    hint = "run it on a GPU host with Nsight installed (docs/capture.md)"
    if command == "torch":
        hint = "run it on a GPU host, or record on the CPU with --device cpu (its module ranges and CPU ops, no kernel)"
    return f"capture {command} needs {' and '.join(missing)}: {hint}"
