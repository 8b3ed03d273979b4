"""``tracepipe capture nsys|ncu|torch|all``: run a model (or a script) under each profiler, into one folder.

Each subcommand starts ``python -m pipeline.capture.runner`` under the tool, so
the profiled process is a fresh one, and writes into ``--out``::

    layer_shapes.json   per module call: shapes, dtypes, analytic MACs (normalizes to layer_shapes)
    nsys.nsys-rep       nsys report (nsys), and nsys.sqlite[.gz] exported from it
    torch_trace.json.gz PyTorch profiler chrome trace (torch)
    ncu.ncu-rep         ncu report, and ncu_raw.csv / ncu_details.csv imported from it (ncu)
    manifest.json       GPU, driver, CUDA, torch and tool versions, command, model, shapes, step results

Only the ``torch`` import happens in the child, so this module imports on any box.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from pipeline.capture.manifest import build_manifest, write_manifest
from pipeline.capture.runner import LAYER_FILE
from pipeline.capture.tools import LIBDW, LIBDW_HINT, find_importer, find_tool, has_library, preflight
from pipeline.lean import users_environment

#: The same sections as the committed H200 sample (ncu's ``basic`` set) ...
NCU_SECTIONS = ("LaunchStats", "Occupancy", "SpeedOfLight", "WorkloadDistribution")
#: ... plus instruction counters for measured MACs: FP32/FP16/FP64 FMA, add, mul (per thread,
#: predicated on) and the tensor-pipe op counters by source type.  Names ncu does not know are dropped.
NCU_METRICS = (
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__ops_path_tensor_src_fp16.sum",  # what ncu 2025.3 lists on H200 (no dst_ split)
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp64.sum",
)
#: ``--sm-counters``: per-SM spread of each launch (``.min/.max/.avg/.sum`` over the SMs) -- active cycles,
#: warp instructions and blocks (CTAs) launched -- for ``sql/kernel_sm_spread.sql``, which compares them with
#: the round-robin dispatch model; LaunchStats (always collected) gives ``launch__sm_count`` and the grid.
SM_SPREAD_METRICS = tuple(
    f"{counter}.{stat}"
    for counter in ("sm__cycles_active", "sm__inst_executed", "sm__ctas_launched", "sm__warps_launched")
    for stat in ("min", "max", "avg", "sum")
)


class CaptureError(click.ClickException):
    """A capture step that could not be done (tool missing, tool failed): exit 1 with one line."""


@dataclass
class Job:
    """Everything one capture needs; built from the command line."""

    out: Path
    model: str | None
    factory_kwargs: str
    input_shapes: tuple[str, ...]
    device: str
    dtype: str
    warmup: int
    iters: int
    root_name: str
    step_name: str
    depth: int | None
    script: tuple[str, ...]
    lib_dir: Path | None
    gzip_sqlite: bool
    train: bool = False
    loss: str = ""
    backward_ranges: str = "emit_nvtx"
    graph: bool = False
    compile: str = "none"
    cuda_graph_trace: str = "node"
    steps: list[dict[str, Any]] = field(default_factory=list)
    tools: dict[str, str | None] = field(default_factory=dict)
    inductor_cache: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tracepipe-inductor-")))

    def runner_argv(self, mode: str, iters: int | None = None) -> list[str]:
        argv = [sys.executable, "-m", "pipeline.capture.runner", "--mode", mode, "--out", str(self.out)]
        argv += ["--root-name", self.root_name, "--step-name", self.step_name, "--capture-id", self.out.name]
        if self.depth is not None:
            argv += ["--depth", str(self.depth)]
        argv += ["--backward-ranges", self.backward_ranges]
        if self.script:
            return [*argv, "--", *user_script(self.script)]
        argv += ["--model", str(self.model), "--device", self.device, "--dtype", self.dtype]
        argv += ["--warmup", str(self.warmup), "--iters", str(iters if iters is not None else self.iters)]
        if self.train:
            argv += ["--train"]
        if self.compile != "none":
            argv += ["--compile", self.compile]
        if self.loss:
            argv += ["--loss", self.loss]
        if self.graph:
            argv += ["--graph"]
        if self.factory_kwargs:
            argv += ["--factory-kwargs", self.factory_kwargs]
        for s in self.input_shapes:
            argv += ["--input-shape", s]
        return argv

    def env(self) -> dict[str, str]:
        env = users_environment()  # the user's program runs as the user set it up, not as tracepipe's own process
        root = str(Path(__file__).resolve().parents[2])  # the folder holding `pipeline/`
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        # A fresh Inductor cache: every graph compiles in the run (a cached one would skip the compile that
        # compiled_kernels.json is recorded from). Graph keys are content hashes, the same in every tool's run.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(self.inductor_cache)
        if self.lib_dir is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (str(self.lib_dir), env.get("LD_LIBRARY_PATH", "")) if p
            )
        return env


def user_script(cmd: tuple[str, ...]) -> list[str]:
    """``python script.py args`` -> ``script.py args`` (the runner is the python that runs it)."""
    if cmd and re.fullmatch(r"(.*/)?python[0-9.]*", cmd[0]):
        cmd = cmd[1:]
    if not cmd or not cmd[0].endswith(".py"):
        raise click.UsageError("after -- give `python script.py [args]` (only Python scripts can be annotated)")
    return list(cmd)


def run_step(job: Job, name: str, argv: list[str], outputs: list[Path], stdout: Path | None = None) -> bool:
    """Run one command, record it in the manifest's steps; True when it succeeded and wrote ``outputs``."""
    click.echo(f"[capture] {name}: {shlex.join(argv)}", err=True)
    t0 = time.monotonic()
    with open(stdout, "w") if stdout else open(os.devnull, "w") as sink:
        proc = subprocess.run(
            argv, env=job.env(), stdout=sink if stdout else None, stderr=subprocess.PIPE, text=True, check=False
        )
    sys.stderr.write(proc.stderr[-4000:])
    ok = proc.returncode == 0 and all(p.exists() for p in outputs)
    job.steps.append(
        {
            "step": name,
            "command": argv,
            "returncode": proc.returncode,
            "seconds": round(time.monotonic() - t0, 2),
            "outputs": [p.name for p in outputs if p.exists()],
            "ok": ok,
            "stderr_tail": proc.stderr.strip().splitlines()[-5:],
        }
    )
    return ok


def gzip_file(path: Path) -> Path:
    dest = path.with_name(path.name + ".gz")
    with open(path, "rb") as f, gzip.open(dest, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g, 1 << 20)
    path.unlink()
    return dest


def capture_shapes(job: Job) -> None:
    if job.script:
        return  # a user script's layers are recorded only in its ranges (see docs/capture.md)
    if not run_step(job, "shapes", job.runner_argv("shapes"), [job.out / LAYER_FILE]):
        raise CaptureError("the shape pass failed: see the traceback above")


def capture_nsys(job: Job) -> None:
    nsys = job.tools.setdefault("nsys", find_tool("nsys"))
    if nsys is None:
        raise CaptureError("nsys not found on PATH nor under /opt/nvidia (Nsight Systems or Nsight Compute install)")
    if not has_library(LIBDW, job.env()):
        click.echo(f"[capture] warning: {LIBDW_HINT}", err=True)
    rep = job.out / "nsys.nsys-rep"
    for stale in (rep, job.out / "nsys.qdstrm", job.out / "nsys.sqlite", job.out / "nsys.sqlite.gz"):
        stale.unlink(missing_ok=True)
    # node: one kernel row per replayed graph node (graph: one row per whole-graph launch, no kernels)
    argv = [nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none"]
    argv += [f"--cuda-graph-trace={job.cuda_graph_trace}"]
    if not job.script:  # a user script marks its own window, if at all: record all of it
        argv += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    argv += ["--force-overwrite=true", "-o", str(job.out / "nsys"), *job.runner_argv("nsys")]
    run_step(job, "nsys profile", argv, [])
    qdstrm = job.out / "nsys.qdstrm"
    if not rep.exists() and qdstrm.exists():
        importer = find_importer(nsys)
        if importer is None or not has_library(LIBDW, job.env()):
            raise CaptureError(f"nsys wrote {qdstrm} but no .nsys-rep: {LIBDW_HINT}")
        run_step(job, "qdstrm import", [importer, "-i", str(qdstrm)], [rep])
    if not rep.exists():
        raise CaptureError(f"nsys made no report in {job.out} (see its output above); {LIBDW_HINT}")
    sqlite = job.out / "nsys.sqlite"
    argv = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite), str(rep)]
    if not run_step(job, "nsys export", argv, [sqlite]):
        raise CaptureError(f"nsys export of {rep} failed (see above)")
    if job.gzip_sqlite:
        gzip_file(sqlite)


def requested_metrics(sm_counters: bool, extra: tuple[str, ...]) -> list[str]:
    """``NCU_METRICS``, plus ``SM_SPREAD_METRICS`` with ``--sm-counters``, plus ``--metrics`` (comma lists),
    in that order without repeats."""
    names = [*NCU_METRICS, *(SM_SPREAD_METRICS if sm_counters else ())]
    names += [m.strip() for item in extra for m in item.split(",") if m.strip()]
    return list(dict.fromkeys(names))


def ncu_metrics(ncu: str, job: Job, wanted: list[str] | None = None) -> list[str]:
    """The metrics of ``wanted`` (default ``NCU_METRICS``) that this ncu knows on this GPU (an unknown name
    fails the whole run, so it is dropped, with a warning for names the user asked for)."""
    wanted = list(NCU_METRICS) if wanted is None else wanted
    proc = subprocess.run(
        [ncu, "--query-metrics", "--csv"], capture_output=True, text=True, env=job.env(), check=False, timeout=120
    )
    if proc.returncode != 0:
        return wanted
    known = set(re.findall(r'^"?([a-z0-9_]+__[a-z0-9_]+)', proc.stdout, flags=re.M))
    dropped = [m for m in wanted if m.rsplit(".", 1)[0] not in known and m not in NCU_METRICS]
    if dropped:
        click.echo(f"[capture] warning: ncu does not list {', '.join(dropped)} on this GPU: not collected", err=True)
    return [m for m in wanted if m.rsplit(".", 1)[0] in known]


def capture_ncu(
    job: Job,
    launch_count: int,
    nvtx_include: tuple[str, ...],
    keep_rep: bool,
    sm_counters: bool = False,
    extra_metrics: tuple[str, ...] = (),
) -> None:
    ncu = job.tools.setdefault("ncu", find_tool("ncu"))
    if ncu is None:
        raise CaptureError("ncu not found on PATH nor under /opt/nvidia or /usr/local/cuda/bin")
    metrics = ncu_metrics(ncu, job, requested_metrics(sm_counters, extra_metrics))
    rep = job.out / "ncu.ncu-rep"
    argv = [ncu, "--clock-control", "none", "--nvtx", "--force-overwrite", "-o", str(job.out / "ncu")]
    if not job.script:
        argv += ["--profile-from-start", "off"]
    for pattern in nvtx_include:
        argv += ["--nvtx-include", pattern]
    if launch_count:
        argv += ["--launch-count", str(launch_count)]
    for section in NCU_SECTIONS:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    # One measured forward: ncu replays every kernel many times.
    if not run_step(job, "ncu profile", [*argv, *job.runner_argv("ncu", iters=1)], [rep]):
        raise CaptureError(f"ncu made no report {rep} (see its output above)")
    # Importing the report gives CSV without the program's stdout and ==PROF== lines mixed in.
    for page, name in (("raw", "ncu_raw.csv"), ("details", "ncu_details.csv")):
        csv = job.out / name
        ok = run_step(job, f"ncu import {page}", [ncu, "--import", str(rep), "--csv", "--page", page], [], csv)
        if ok and page == "details":
            gzip_file(csv)
    if not keep_rep:
        rep.unlink(missing_ok=True)


def capture_torch(job: Job) -> None:
    trace = job.out / "torch_trace.json.gz"
    if job.script:
        trace = job.out / "torch_trace.json"
    if not run_step(job, "torch profiler", job.runner_argv("torch"), [trace]):
        status = job.steps[-1]["returncode"]
        said = f"exited with status {status}" if status else f"wrote no {trace.name}"
        raise CaptureError(f"the PyTorch profiler run {said} (see above)")


def finish(job: Job, command: list[str]) -> None:
    manifest = build_manifest(
        capture_id=job.out.name,
        command=command,
        model=job.model or shlex.join(job.script),
        factory_kwargs=json.loads(job.factory_kwargs) if job.factory_kwargs else {},
        input_shapes=[[int(x) for x in s.split(":", 1)[0].split(",") if x] for s in job.input_shapes],
        # a script runs its own steps, warm-up and dtype: the model mode's options did not apply (None)
        dtype=None if job.script else job.dtype,
        warmup=None if job.script else job.warmup,
        iters=None if job.script else job.iters,
        root_name=job.root_name,
        depth=job.depth,
        tools=job.tools,
        steps=job.steps,
    )
    path = write_manifest(job.out, manifest)
    shutil.rmtree(job.inductor_cache, ignore_errors=True)
    click.echo(f"[capture] wrote {path}", err=True)


def common(f: Any) -> Any:
    options = [
        click.option("--model", "-m", help="MODULE:FACTORY or file.py:FACTORY returning an nn.Module."),
        click.option("--factory-kwargs", default="", help="JSON keyword arguments, e.g. '{\"d_model\": 512}'."),
        click.option("--input-shape", "-i", multiple=True, help="Shape of one random input (repeat per input)."),
        click.option("--out", "-o", type=click.Path(path_type=Path), required=True, help="Capture folder."),
        click.option("--device", default="cuda", show_default=True),
        click.option("--dtype", default="float32", show_default=True, help="torch dtype of weights and inputs."),
        click.option("--warmup", default=3, show_default=True, help="Forwards before the capture window."),
        click.option("--iters", default=3, show_default=True, help="Measured forwards (ncu always runs 1)."),
        click.option("--root-name", default="model", show_default=True, help="Range text of the root module."),
        click.option("--step-name", default="step", show_default=True, help="Range text of one measured forward."),
        click.option("--depth", type=int, default=None, help="Annotate modules down to this depth (root = 0)."),
        click.option("--lib-dir", type=click.Path(path_type=Path), help="Prepended to LD_LIBRARY_PATH (libdw)."),
        click.option("--train", is_flag=True, help="Measure training steps: forward, loss, backward, AdamW step."),
        click.option("--loss", default="", help="MODULE:FUNC(output, *inputs) -> scalar (default: mean square)."),
        click.option(
            "--backward-ranges",
            type=click.Choice(["emit_nvtx", "hooks", "none"]),
            default="emit_nvtx",
            show_default=True,
            help="How nsys sees which forward op each backward op belongs to (see docs/capture.md).",
        ),
        click.option("--graph", is_flag=True, help="Capture the forward as a CUDA graph and replay it per step."),
        click.option(
            "--compile",
            "compile_mode",
            type=click.Choice(["none", "default", "reduce-overhead", "max-autotune"]),
            default="none",
            show_default=True,
            help="torch.compile the model (-m) with this mode; which module each compiled kernel computes goes to "
            "compiled_kernels.json (a script's own torch.compile is recorded the same way).",
        ),
        click.option(
            "--cuda-graph-trace",
            type=click.Choice(["node", "graph"]),
            default="node",
            show_default=True,
            help="nsys: one row per replayed kernel (node) or per whole graph launch (graph).",
        ),
        click.argument("script", nargs=-1, type=click.UNPROCESSED),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def gzip_option(f: Any) -> Any:
    """Only the nsys step writes a .sqlite, so only nsys and all offer to gzip it."""
    return click.option("--gzip/--no-gzip", "gzip_sqlite", default=True, show_default=True, help="Gzip nsys.sqlite.")(f)


def ncu_options(f: Any) -> Any:
    f = click.option(
        "--metrics",
        "extra_metrics",
        multiple=True,
        help="More ncu metrics (comma-separated, repeatable), passed to ncu --metrics; names it lacks are dropped.",
    )(f)
    f = click.option(
        "--sm-counters",
        is_flag=True,
        help="Also collect per-SM spread counters (sm__cycles_active, sm__inst_executed, sm__ctas_launched, "
        "sm__warps_launched .min/.max/.avg/.sum) for the kernel_sm_spread view.",
    )(f)
    f = click.option("--keep-rep", is_flag=True, help="Keep ncu.ncu-rep (large) beside the CSVs.")(f)
    f = click.option("--nvtx-include", multiple=True, help="ncu --nvtx-include filter, e.g. 'step/model/layer1/'.")(f)
    f = click.option("--launch-count", default=200, show_default=True, help="Kernels ncu profiles (0: all).")(f)
    return f


NCU_KWARGS = ("launch_count", "nvtx_include", "keep_rep", "sm_counters", "extra_metrics")


def ncu_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    """The ncu options, taken out of the command's keyword arguments (the rest build the Job)."""
    return {name: kw.pop(name) for name in NCU_KWARGS}


def make_job(kw: dict[str, Any]) -> Job:
    script = tuple(kw.pop("script"))
    if not script and not (kw["model"] and kw["input_shape"]):
        raise click.UsageError("give --model and --input-shape, or -- python script.py")
    if kw.get("graph") and kw.get("compile_mode", "none") != "none":
        raise click.UsageError(
            "--graph and --compile both record CUDA graphs their own way: give one (reduce-overhead)"
        )
    out: Path = kw["out"]
    out.mkdir(parents=True, exist_ok=True)
    return Job(
        out=out.resolve(),
        model=kw["model"],
        factory_kwargs=kw["factory_kwargs"],
        input_shapes=tuple(kw["input_shape"]),
        device=kw["device"],
        dtype=kw["dtype"],
        warmup=kw["warmup"],
        iters=kw["iters"],
        root_name=kw["root_name"],
        step_name=kw["step_name"],
        depth=kw["depth"],
        script=script,
        lib_dir=kw["lib_dir"].resolve() if kw["lib_dir"] else None,
        gzip_sqlite=kw.get("gzip_sqlite", True),
        train=kw.get("train", False),
        loss=kw.get("loss", ""),
        backward_ranges=kw.get("backward_ranges", "emit_nvtx"),
        graph=kw.get("graph", False),
        compile=kw.get("compile_mode", "none"),
        cuda_graph_trace=kw.get("cuda_graph_trace", "node"),
    )


@click.group()
def capture() -> None:
    """Record nsys, ncu and PyTorch traces of a model with one NVTX range per module (GPU host).

    \b
    Every module call is a range whose text is its qualified name (layer1.0.conv1);
    the root is --root-name, each measured forward a --step-name range. Warm-up
    forwards run outside the capture window. Shapes, dtypes and analytic MACs of
    every call go to layer_shapes.json. See docs/capture.md.

    \b
    Examples:
      tracepipe capture all -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/resnet18
      tracepipe capture ncu -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/r18 --launch-count 50
      tracepipe capture nsys -o cap/mine -- python train.py --epochs 1
    """


def _run(kw: dict[str, Any], steps: list[str], ncu_kw: dict[str, Any] | None = None) -> None:
    command = "all" if len(steps) > 1 else steps[0]
    problem = preflight(command, steps, kw["device"])
    if problem is not None:
        click.echo(f"error: {problem}", err=True)
        sys.exit(2)
    job = make_job(kw)
    failures: list[str] = []
    for step in ["shapes", *steps]:
        try:
            if step == "shapes":
                capture_shapes(job)
            elif step == "nsys":
                capture_nsys(job)
            elif step == "torch":
                capture_torch(job)
            elif step == "ncu":
                capture_ncu(job, **(ncu_kw or {}))
        except CaptureError as e:
            failures.append(f"{step}: {e.message}")
            job.steps.append({"step": step, "ok": False, "error": e.message})
            click.echo(f"[capture] {step} failed: {e.message}", err=True)
            if step == "shapes":
                break
    finish(job, sys.argv)
    if failures:
        raise CaptureError("; ".join(failures))


@capture.command()
@common
@gzip_option
def nsys(**kw: Any) -> None:
    """nsys profile (CUDA + NVTX) of the measured forwards, or after -- of the whole script, exported to
    nsys.sqlite.gz.

    \b
    Examples:
      tracepipe capture nsys -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/resnet18
      tracepipe capture nsys -m mymodel.py:build --factory-kwargs '{"width": 64}' -i 4,3,32,32 -o cap/mine
      tracepipe capture nsys -o cap/train --lib-dir /tmp/dw/usr/lib/x86_64-linux-gnu -- python train.py
    """
    _run(kw, ["nsys"])


@capture.command()
@common
@ncu_options
def ncu(**kw: Any) -> None:
    """ncu of one measured forward: ncu_raw.csv (raw page) and ncu_details.csv.gz (sections).

    \b
    Examples:
      tracepipe capture ncu -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/resnet18
      tracepipe capture ncu -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/r18 --launch-count 50
      tracepipe capture ncu -o cap/r18 --nvtx-include 'step/model/layer1/' -- python infer.py
    """
    _run(kw, ["ncu"], ncu_kwargs(kw))


@capture.command()
@common
def torch(**kw: Any) -> None:
    """PyTorch profiler chrome trace of the measured forwards (torch_trace.json.gz), or after -- of the whole
    script (torch_trace.json).

    \b
    Examples:
      tracepipe capture torch -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/resnet18
      tracepipe capture torch -m torchvision.models:resnet18 -i 1,3,64,64 -o cap/cpu --device cpu
      tracepipe capture torch -o cap/train -- python train.py --epochs 1
    """
    _run(kw, ["torch"])


@capture.command(name="all")
@common
@gzip_option
@ncu_options
def all_(**kw: Any) -> None:
    """nsys, then torch, then ncu, into one folder; one failing tool does not stop the others.

    \b
    Examples:
      tracepipe capture all -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/resnet18
      tracepipe capture all -m torchvision.models:resnet18 -i 8,3,224,224 -o cap/r18 --depth 2 --launch-count 0
      tracepipe capture all -o cap/mine -- python train.py --epochs 1
    """
    _run(kw, ["nsys", "torch", "ncu"], ncu_kwargs(kw))


if __name__ == "__main__":  # `python -m pipeline.capture.cli ...`: the capture alone, without the analysis deps
    capture()
