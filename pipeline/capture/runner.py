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
import warnings
from pathlib import Path
from typing import Any

from pipeline.capture.annotate import (
    GlobalAnnotator,
    LayerRecorder,
    ModelAnnotator,
    OptimizerRanges,
    RangeBackend,
    unwrap_compiled,
)
from pipeline.capture.compiled import CompiledKernelRecorder

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
        shape = [int(x) for x in text.split(":", 1)[0].replace("x", ",").split(",") if x.strip()]
    except ValueError as e:
        raise ValueError(f"bad --input-shape {text!r}: expected e.g. 8,3,224,224 or 4,64:int512") from e
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"bad --input-shape {text!r}: dimensions must be positive")
    return shape


def int_high(text: str) -> int | None:
    """``4,64:int512`` -> 512 (token ids in [0, 512)); a plain shape -> None (random floats)."""
    if ":" not in text:
        return None
    kind = text.split(":", 1)[1]
    if not kind.startswith("int") or not kind[3:].isdigit() or int(kind[3:]) <= 0:
        raise ValueError(f"bad --input-shape {text!r}: the suffix must be :int<N>, e.g. 4,64:int512")
    return int(kind[3:])


def make_input(torch: Any, text: str, device: str, dtype: Any) -> Any:
    high = int_high(text)
    if high is not None:
        return torch.randint(0, high, parse_shape(text), device=device)
    return torch.randn(*parse_shape(text), device=device, dtype=dtype)


def mean_square_loss(output: Any, *inputs: Any) -> Any:
    """The default training loss: any output tensor(s) -> one scalar that depends on all of them."""
    outs = output if isinstance(output, (tuple, list)) else (output,)
    return sum(o.float().square().mean() for o in outs if hasattr(o, "float"))


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


class Stepper:
    """One measured iteration in each ``--mode``: an inference forward, a training step, or a graph replay.

    A training step is ``step`` range { forward (module ranges), ``loss`` range, ``loss.backward()``,
    ``--optimizer-name`` range { ``optimizer.step()``, ``zero_grad`` } }.  Backward kernels are launched from
    autograd's own thread, where no module range is open: ``--backward-ranges`` says how the link to the forward
    layer is recorded
    (``emit_nvtx``: every op's NVTX range carries its autograd sequence number, for nsys; the PyTorch trace
    records sequence numbers anyway; ``hooks``: module backward hooks push the module's range, measured in
    docs/capture.md; ``none``).
    """

    def __init__(self, args: argparse.Namespace, torch: Any, model: Any, inputs: list[Any], backend: Any) -> None:
        self.args, self.torch, self.model, self.inputs, self.backend = args, torch, model, inputs, backend
        self.optimizer = None
        self.loss_fn = load_factory(args.loss) if args.loss else mean_square_loss
        if args.train:
            self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.graph = None

    def warmup(self) -> None:
        torch = self.torch
        if self.args.graph:
            side = torch.cuda.Stream()  # CUDA graphs want warm-up on a side stream
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                for _ in range(self.args.warmup):
                    self.model(*self.inputs)
            torch.cuda.current_stream().wait_stream(side)
            return
        for _ in range(self.args.warmup):
            self.step(annotate=False)

    def capture_graph(self) -> None:
        """Record the forward into a CUDA graph (inside the capture window: nsys sees the nodes being made)."""
        torch = self.torch
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.static_out = self.model(*self.inputs)

    def step(self, annotate: bool = True) -> None:
        torch, args = self.torch, self.args
        step_range = self.backend.range(args.step_name) if annotate else _null()
        with step_range:
            if self.graph is not None:
                self.graph.replay()
            elif not args.train:
                with torch.no_grad():
                    self.model(*self.inputs)
            else:
                output = self.model(*self.inputs)
                with self.backend.range(args.loss_name) if annotate else _null():  # its backward: the `loss` layer
                    loss = self.loss_fn(output, *self.inputs)
                loss.backward()
                with self.backend.range(args.optimizer_name) if annotate else _null():
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        _sync(torch, args.device)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def backward_ranges(args: argparse.Namespace, torch: Any, model: Any) -> tuple[Any, Any]:
    """(context manager around the measured steps, hook handles to remove) for ``--backward-ranges``."""
    if not args.train or args.backward_ranges == "none" or args.mode not in ("nsys", "time"):
        return _null(), None
    if args.backward_ranges == "hooks":
        from pipeline.capture.annotate import BackwardHookRanges

        return _null(), BackwardHookRanges(model, root_name=args.root_name, depth=args.depth)
    return torch.autograd.profiler.emit_nvtx(record_shapes=False), None


def run_model(args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = json.loads(args.factory_kwargs) if args.factory_kwargs else {}
    dtype = getattr(torch, args.dtype)
    model = load_factory(args.model)(**kwargs).to(args.device, dtype)
    model.train(args.train)
    inputs = [make_input(torch, s, args.device, dtype) for s in args.input_shape]
    # NVTX for nsys/ncu, record_function for the PyTorch trace.  Under emit_nvtx every record_function becomes
    # an NVTX range too (text `name, op_id = N`), so nsys mode then leaves record_function out.
    emit = args.train and args.mode in ("nsys", "time") and args.backward_ranges == "emit_nvtx"
    backend = RangeBackend(use_record_function=not (emit and args.mode == "nsys"))
    recorder = LayerRecorder()
    annotator = ModelAnnotator(model, backend, root_name=args.root_name, depth=args.depth, recorder=recorder)
    with torch.no_grad():  # shapes and MACs of the eager model: inside a compiled region no hook runs
        recorder.active = True
        unwrap_compiled(model)(*inputs)
        recorder.active = False
    compiled = None
    if args.compile != "none" and args.mode != "shapes":
        compiled = compiled_recorder()
        model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
        annotator.annotate_wrapper(model)
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
    stepper = Stepper(args, torch, model, inputs, backend)
    stepper.warmup()
    _sync(torch, args.device)
    around, hooks = backward_ranges(args, torch, model)
    times: list[float] = []
    if args.mode == "torch":
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if args.device.startswith("cuda"):
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True) as prof:
            prof.add_metadata(CAPTURE_MARK, "1")  # (taken only while the profiler runs)
            if args.graph:
                stepper.capture_graph()
            for _ in range(args.iters):
                times.append(_timed(stepper.step))
        trace = out / "torch_trace.json"
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as f, gzip.open(str(trace) + ".gz", "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
        trace.unlink()
    else:
        if args.mode != "time":
            torch.cuda.profiler.start()
        if args.graph:
            stepper.capture_graph()
        with around:
            for _ in range(args.iters):
                times.append(_timed(stepper.step))
        if args.mode != "time":
            torch.cuda.profiler.stop()
    if hooks is not None:
        hooks.remove()
    annotator.remove()
    if compiled is not None:
        compiled.write(out, capture_id=args.capture_id or out.name, root_name=args.root_name)
    timing = {"mode": args.mode, "train": args.train, "graph": args.graph, "step_s": times}
    timing["backward_ranges"] = args.backward_ranges if args.train else None
    (out / f"timing_{args.mode}.json").write_text(json.dumps(timing) + "\n")
    print(f"tracepipe-runner: {args.mode} done, {len(recorder.calls)} module calls per forward", file=sys.stderr)


def _timed(fn: Any) -> float:
    import time

    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


#: The key ``tracepipe capture`` marks its PyTorch traces with (``profile.add_metadata``): normalize then takes the
#: module ranges, named by qualified name, as the layers (the same key as ``normalize.chrome_map.CAPTURE_MARK``,
#: not imported: the capture side runs without the normalizer's dependencies).
CAPTURE_MARK = "tracepipe_capture"


def compiled_recorder() -> CompiledKernelRecorder:
    """The recorder of compiled graphs, installed before anything compiles (a no-op for eager models)."""
    recorder = CompiledKernelRecorder()
    recorder.install()
    return recorder


def run_script(script: str) -> object:
    """Run ``script`` as ``__main__``; returns what it passed to ``sys.exit`` (None when it just returned). A script
    ending in ``sys.exit(main())`` raises SystemExit even when it succeeds: caught here, so the profiler still
    exports its trace and the recorder still writes; :func:`run_user_script` exits with the script's status after."""
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        return e.code
    return None


def run_user_script(args: argparse.Namespace) -> None:
    """Run a user's script with every module call annotated by global hooks, every optimizer step in an
    ``optimizer`` range (global optimizer hooks), and under nsys, every PyTorch op in an NVTX range carrying its
    autograd sequence number (``emit_nvtx`` around the whole script), so that backward work links to its layer
    as ``capture torch`` links it from the PyTorch trace's own sequence numbers."""
    import torch

    under_emit = args.mode == "nsys" and args.backward_ranges == "emit_nvtx"
    # Under emit_nvtx every record_function is an NVTX range already: NVTX alone, not both
    backend = RangeBackend(use_record_function=not under_emit)
    GlobalAnnotator(backend, root_name=args.root_name, depth=args.depth)
    # PyTorch warns, at each call of a torch.compile'd module, that global module hooks fire once more for its
    # OptimizedModule: those are these hooks, and that call is the range the compiled region runs in (named as the
    # model it wraps, docs/capture.md). The user's script has no such hooks: the warning is not theirs to act on.
    warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks")
    optimizer_ranges = OptimizerRanges(backend, args.optimizer_name)
    recorder = compiled_recorder()
    script, *rest = args.script
    sys.argv = [script, *rest]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.mode == "torch":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
                prof.add_metadata(CAPTURE_MARK, "1")  # (taken only while the profiler runs)
                status = run_script(script)
            prof.export_chrome_trace(str(out / "torch_trace.json"))
        elif under_emit:
            with torch.autograd.profiler.emit_nvtx(record_shapes=False):
                status = run_script(script)
        else:
            status = run_script(script)
    finally:
        optimizer_ranges.remove()
        recorder.write(out, capture_id=args.capture_id or out.name, root_name=args.root_name)
    if status not in (None, 0):
        raise SystemExit(status)  # the script's own failure, after its trace: the capture reports the status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.capture.runner")
    p.add_argument("--mode", choices=("nsys", "ncu", "torch", "shapes", "time"), required=True)
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
    p.add_argument("--train", action="store_true", help="measure training steps (forward, backward, AdamW)")
    p.add_argument("--loss", default="", help="MODULE:FUNC(output, *inputs) -> scalar; default mean square")
    p.add_argument("--optimizer-name", default="optimizer", help="range text around optimizer.step()")
    p.add_argument("--loss-name", default="loss", help="range text around the loss function")
    p.add_argument("--backward-ranges", choices=("emit_nvtx", "hooks", "none"), default="emit_nvtx")
    p.add_argument("--graph", action="store_true", help="record the forward as a CUDA graph, replay it per step")
    p.add_argument(
        "--compile",
        choices=("none", "default", "reduce-overhead", "max-autotune"),
        default="none",
        help="torch.compile the model with this mode (warm-up compiles it, outside the capture window)",
    )
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
