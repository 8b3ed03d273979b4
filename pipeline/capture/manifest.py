"""``manifest.json``: what was captured, with what, on what - so a trace can be trusted later.

Every probe is best-effort: a missing tool or GPU gives ``null`` and a note,
never an exception, because a manifest must still be written when a capture
step failed (that is when it is needed most).
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"

Runner = Callable[[Sequence[str]], str | None]


def run_text(cmd: Sequence[str]) -> str | None:
    """stdout of ``cmd``, stripped; ``None`` when it cannot run or fails."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def tool_version(exe: str | None, run: Runner = run_text) -> str | None:
    """Last non-empty line of ``exe --version`` (nsys and ncu print a banner first)."""
    if not exe:
        return None
    text = run([exe, "--version"])
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else None


def gpu_info(run: Runner = run_text) -> list[dict[str, str]]:
    """One dict per GPU from ``nvidia-smi`` (name, driver, memory, UUID); empty without one."""
    text = run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,driver_version,memory.total,uuid,pci.bus_id",
            "--format=csv,noheader,nounits",
        ]
    )
    gpus = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 6:
            keys = ("index", "name", "driver_version", "memory_total_mib", "uuid", "pci_bus_id")
            gpus.append(dict(zip(keys, parts, strict=True)))
    return gpus


def torch_info() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"torch": None}
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["device_name"] = props.name
        info["compute_capability"] = f"{props.major}.{props.minor}"
        info["sm_count"] = props.multi_processor_count
    return info


def package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def build_manifest(
    *,
    capture_id: str,
    command: Sequence[str],
    model: str | None,
    factory_kwargs: dict[str, Any] | None,
    input_shapes: Sequence[Sequence[int]],
    dtype: str | None,
    warmup: int | None,
    iters: int | None,
    root_name: str,
    depth: int | None,
    tools: dict[str, str | None],
    steps: list[dict[str, Any]],
    run: Runner = run_text,
    with_torch: bool = True,
) -> dict[str, Any]:
    """The manifest as a dict; ``tools`` maps a tool name to its executable (``None``: not found)."""
    gpus = gpu_info(run)
    return {
        "tracepipe_manifest": 1,
        "capture_id": capture_id,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "command": list(command),
        "model": model,
        "factory_kwargs": factory_kwargs or {},
        "input_shapes": [list(s) for s in input_shapes],
        "dtype": dtype,
        "warmup_iters": warmup,
        "measured_iters": iters,
        "root_name": root_name,
        "depth": depth,
        "gpus": gpus,
        "driver_version": gpus[0]["driver_version"] if gpus else None,
        "versions": {
            **(torch_info() if with_torch else {}),
            "nvtx": package_version("nvtx"),
            "torchvision": package_version("torchvision"),
            **{f"{name}_version": tool_version(exe, run) for name, exe in tools.items()},
        },
        "tools": dict(tools),
        "steps": steps,
    }


def write_manifest(out: Path, manifest: dict[str, Any]) -> Path:
    """Write ``manifest.json``; the steps of earlier captures into the same folder (``capture nsys``, then
    ``capture torch`` of the same script) are kept before this one's, so the folder says how every file in it was
    made."""
    path = out / MANIFEST
    try:
        earlier = json.loads(path.read_text()).get("steps") or []
    except (OSError, ValueError, AttributeError):
        earlier = []
    ran = {step.get("step") for step in manifest.get("steps") or []}
    kept = [step for step in earlier if isinstance(step, dict) and step.get("step") not in ran]
    manifest = {**manifest, "steps": kept + list(manifest.get("steps") or [])}
    path.write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return path
