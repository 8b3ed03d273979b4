"""The process that runs under the profiler: builds the model, annotates it, runs warm-up and measured steps.

``python -m pipeline.capture.runner --mode nsys|ncu|torch|shapes ...`` is what
``tracepipe capture`` puts after ``nsys profile`` / ``ncu``.  Order of work:

1. build the model and inputs (seeded), annotate every module;
2. one forward with the ``LayerRecorder`` on, outside any capture window:
   writes ``layer_shapes.json`` (shapes, dtypes, analytic MACs per call);
3. ``--warmup`` forwards (cuDNN autotuning, lazy init, allocator growth) -
   nsys and ncu are started with their capture off, so none of this is recorded;
4. the measured ``--iters`` forwards, each inside a ``step`` range, between
   ``torch.cuda.profiler.start()/stop()`` (cudaProfilerStart/Stop, which
   ``nsys --capture-range=cudaProfilerApi`` and ``ncu --profile-from-start off``
   obey) or inside ``torch.profiler.profile`` for ``--mode torch``.

``--user-script`` mode instead installs global module hooks and runs a
user's script with ``runpy``; the script's own code decides what runs.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import importlib.util
import json
import os
import runpy
import shutil
import sys
from pathlib import Path
from typing import Any

from pipeline.capture.annotate import GlobalAnnotator, LayerRecorder, ModelAnnotator, RangeBackend

LAYER_FILE = "layer_shapes.json"
LAYER_FORMAT_VERSION = 1


def load_factory(spec: str) -> Any:
    """``package.module:factory`` or ``path/to/file.py:factory`` -> the callable."""
    if ":" not in spec:
        raise ValueError(f"--model needs MODULE:FACTORY, got {spec!r}")
    module_name, func = spec.rsplit(":", 1)
    if module_name.endswith(".py") or os.sep in module_name:
        path = Path(module_name)
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"cannot import {path}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    try:
        return getattr(module, func)
    except AttributeError as e:
        raise ValueError(f"{module_name} has no {func!r}") from e


def parse_shape(text: str) -> list[int]:
    try:
        shape = [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError as e:
        raise ValueError(f"bad --input-shape {text!r}: expected e.g. 8,3,224,224") from e
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"bad --input-shape {text!r}: dimensions must be positive")
    return shape


def layer_document(
    recorder: LayerRecorder, *, capture_id: str, model: str, root_name: str, inputs: list[list[int]], dtype: str
) -> dict[str, Any]:
    """The ``layer_shapes.json`` content.  Its first key marks the format for ``detect_format``."""
    return {
        "tracepipe_layers": LAYER_FORMAT_VERSION,
        "capture_id": capture_id,
        "model": model,
        "root_name": root_name,
        "input_shapes": inputs,
        "dtype": dtype,
        "layers": [c.as_dict() for c in recorder.calls],
    }


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_model(args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = json.loads(args.factory_kwargs) if args.factory_kwargs else {}
    dtype = getattr(torch, args.dtype)
    model = load_factory(args.model)(**kwargs).to(args.device, dtype).eval()
    inputs = [torch.randn(*parse_shape(s), device=args.device, dtype=dtype) for s in args.input_shape]
    # Both kinds of range in every mode: NVTX for nsys/ncu, record_function for the PyTorch trace.
    backend = RangeBackend()
    recorder = LayerRecorder()
    annotator = ModelAnnotator(model, backend, root_name=args.root_name, depth=args.depth, recorder=recorder)
    with torch.no_grad():
        recorder.active = True
        model(*inputs)
        recorder.active = False
        doc = layer_document(
            recorder,
            capture_id=args.capture_id or out.name,
            model=args.model,
            root_name=args.root_name,
            inputs=[parse_shape(s) for s in args.input_shape],
            dtype=args.dtype,
        )
        (out / LAYER_FILE).write_text(json.dumps(doc, indent=1) + "\n")
        if args.mode == "shapes":
            annotator.remove()
            return
        for _ in range(args.warmup):
            model(*inputs)
        _sync(torch, args.device)
        if args.mode == "torch":
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if args.device.startswith("cuda"):
                activities.append(ProfilerActivity.CUDA)
            with profile(activities=activities, record_shapes=True) as prof:
                for _ in range(args.iters):
                    with backend.range(args.step_name):
                        model(*inputs)
                    _sync(torch, args.device)
            trace = out / "torch_trace.json"
            prof.export_chrome_trace(str(trace))
            with open(trace, "rb") as f, gzip.open(str(trace) + ".gz", "wb", compresslevel=6) as g:
                shutil.copyfileobj(f, g)
            trace.unlink()
        else:
            torch.cuda.profiler.start()
            for _ in range(args.iters):
                with backend.range(args.step_name):
                    model(*inputs)
                _sync(torch, args.device)
            torch.cuda.profiler.stop()
    annotator.remove()
    print(f"tracepipe-runner: {args.mode} done, {len(recorder.calls)} module calls per forward", file=sys.stderr)


def run_user_script(args: argparse.Namespace) -> None:
    """Run a user's script with every module call annotated by global hooks."""
    backend = RangeBackend()
    GlobalAnnotator(backend, root_name=args.root_name, depth=args.depth)
    script, *rest = args.script
    sys.argv = [script, *rest]
    if args.mode == "torch":
        from torch.profiler import ProfilerActivity, profile

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            runpy.run_path(script, run_name="__main__")
        prof.export_chrome_trace(str(out / "torch_trace.json"))
    else:
        runpy.run_path(script, run_name="__main__")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.capture.runner")
    p.add_argument("--mode", choices=("nsys", "ncu", "torch", "shapes"), required=True)
    p.add_argument("--model", help="MODULE:FACTORY (or file.py:FACTORY)")
    p.add_argument("--factory-kwargs", default="", help="JSON object of keyword arguments for the factory")
    p.add_argument("--input-shape", action="append", default=[], help="one per positional input, e.g. 8,3,224,224")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--root-name", default="model")
    p.add_argument("--step-name", default="step")
    p.add_argument("--depth", type=int, default=None)
    p.add_argument("--capture-id", default="")
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- script.py args (user-script mode)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.script and args.script[0] == "--":
        args.script = args.script[1:]
    if args.script:
        run_user_script(args)
    else:
        if not args.model or not args.input_shape:
            raise SystemExit("--model and --input-shape are needed (or -- script.py)")
        run_model(args)


if __name__ == "__main__":
    main()
