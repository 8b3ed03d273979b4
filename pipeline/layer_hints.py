"""What a trace lacks for per-layer answers, and the capture that would give it: data only.

Read by normalize (a trace with GPU work and no layer at all is said so at once) and by analyze (the view
``layer_coverage`` says which share of each trace's GPU time has no layer, and why).  A fix is one line a user
can act on, by source format and by what is missing; supporting another tool means adding rows here.
"""

from __future__ import annotations

import pyarrow as pa

#: Ranges that are steps, not layers (as sql/step_gpu_idle.sql counts steps): PyTorch's ``ProfilerStep#N`` and
#: tracepipe capture's ``step`` (``step#N``, ``step_N``).
STEP_RANGE = r"^(ProfilerStep#\d+|step([#_ ]?\d+)?)$"

#: Ranges that place work but name no layer of the model: steps, and optimizer steps (their own pass).
NOT_LAYERS = r"^(ProfilerStep#\d+|step([#_ ]?\d+)?|optimizer|Optimizer\.(step|zero_grad)#.+)$"

#: What is missing -> what it means.
LACKS: dict[str, str] = {
    "no_layers": "no module range or frame in the trace",
    "no_cpu_ops": "no module frame and no CPU op in the trace (GPU activity alone): nothing ties its work to the model",
    "no_modules": "no module frame in the trace although it holds Python stacks: its work ran outside nn.Module calls",
    "backward_unlinked": "backward work is linked to no forward op",
    "forward_unrecorded": "backward work whose forward ops the trace does not hold (they ran before it was recorded)",
    "partial": "work launched outside every module range",
    "other_domain": "work launched inside NVTX ranges of other domains only",
    "no_launch": "work whose launching API call the trace lacks (its correlation id matches no call)",
}

#: An nsys trace without layers: nsys exports are of any CUDA program (OpenMP/OpenACC offload, Julia, plain CUDA C++
#: in real exports of other projects), so the fix opens with ranges of one's own and names PyTorch's ways after.
NSYS_NO_LAYERS = (
    "open NVTX ranges (nvtxRangePush/Pop) around the code whose GPU work is one layer; for PyTorch, profile with "
    "`nsys profile --pytorch=functions-trace,autograd-nvtx` (module classes, backward linked), or `tracepipe capture "
    "nsys` (qualified module names)"
)

#: Backward work whose forward ops ran before an nsys capture began.
NSYS_WHOLE_STEPS = (
    "capture whole steps: begin the capture range before a step's forward pass (`nsys profile --capture-range`, "
    "or `tracepipe capture nsys`)"
)

#: Work launched inside ranges of other NVTX domains than the layer domain.
NSYS_LAYER_DOMAIN = (
    "the layers are the default NVTX domain's ranges when it has push/pop ranges, else the busiest domain's: open the "
    "ranges that name layers in the default domain, or leave it without push/pop ranges"
)

#: (source format, what is missing) -> the capture that gives it.
FIXES: dict[tuple[str, str], str] = {
    ("chrome-trace", "no_layers"): "record with torch.profiler.profile(with_stack=True) (its nn.Module frames are "
    "layers), or capture with `tracepipe capture torch`",
    ("chrome-trace", "no_cpu_ops"): "record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and "
    "with_stack=True (the CPU ops link each kernel to its launch; the nn.Module frames are layers)",
    ("chrome-trace", "no_modules"): "wrap the work in nn.Module calls or torch.profiler.record_function ranges (each "
    "is a layer; the stacks are recorded already)",
    ("chrome-trace", "backward_unlinked"): "record with torch.profiler of PyTorch >= 1.9 (it writes the sequence "
    "numbers that link backward to forward; 1.8's wrote none), or capture with `tracepipe capture torch`",
    ("chrome-trace", "forward_unrecorded"): "record whole steps: start the profiler before a step's forward pass "
    "(each active step of a torch.profiler.schedule holds a forward and its backward)",
    ("nsys-sqlite", "no_layers"): NSYS_NO_LAYERS,
    ("nsys-sqlite", "forward_unrecorded"): NSYS_WHOLE_STEPS,
    ("nsys-sqlite", "backward_unlinked"): "profile with `nsys profile --pytorch=autograd-nvtx` (its op ranges link "
    "backward to forward), or `tracepipe capture nsys`",
    ("nsys-rep", "no_layers"): NSYS_NO_LAYERS,
    ("nsys-rep", "forward_unrecorded"): NSYS_WHOLE_STEPS,
    ("nsys-rep", "backward_unlinked"): "profile with `nsys profile --pytorch=autograd-nvtx` (its op ranges link "
    "backward to forward), or `tracepipe capture nsys`",
    ("nsys-sqlite", "other_domain"): NSYS_LAYER_DOMAIN,
    ("nsys-rep", "other_domain"): NSYS_LAYER_DOMAIN,
    ("nsys-sqlite", "partial"): "capture with `tracepipe capture nsys`, which ranges every module call (nsys "
    "--pytorch=functions-trace ranges torch's own module classes only)",
    ("nsys-rep", "partial"): "capture with `tracepipe capture nsys`, which ranges every module call (nsys "
    "--pytorch=functions-trace ranges torch's own module classes only)",
}
#: Said by normalize where no row of FIXES applies.
NO_FIX = "wrap the work in modules, or in record_function / NVTX ranges of your own"


def layer_hints_table() -> pa.Table:
    """What a trace lacks for per-layer answers and the capture that gives it: source_format, lack, meaning, fix.

    One row per source format of FIXES and lack; fix is NULL where no capture helps."""
    formats = dict.fromkeys(fmt for fmt, _ in FIXES)
    rows = [
        {"source_format": fmt, "lack": lack, "meaning": meaning, "fix": FIXES.get((fmt, lack))}
        for fmt in formats
        for lack, meaning in LACKS.items()
    ]
    return pa.Table.from_pylist(rows)


#: A trace without layers, by what it holds: (lack, has CPU ops, has Python stacks), the first that applies where
#: its format has a fix for that lack (as layer_coverage's rule): GPU activity alone (``with_stack`` is no help
#: without ``ProfilerActivity.CPU``: 4 real traces), stacks without a module frame (8 real traces whose scripts
#: call no module), else none of them.
NO_LAYER_CASES: tuple[tuple[str, bool | None, bool | None], ...] = (
    ("no_cpu_ops", False, None),
    ("no_modules", True, True),
    ("no_layers", None, None),
)


def no_layer_lack(source_format: str, has_ops: bool, has_stacks: bool) -> str:
    """The lack of a trace with GPU work and no layer range at all (:data:`NO_LAYER_CASES`)."""
    return next(
        lack
        for lack, ops, stacks in NO_LAYER_CASES
        if (ops is None or ops == has_ops)
        and (stacks is None or stacks == has_stacks)
        and (lack == "no_layers" or (source_format, lack) in FIXES)
    )


def no_layer_warning(source_format: str, lack: str = "no_layers") -> str:
    """normalize's warning for a trace with GPU work and no layer range at all."""
    fix = FIXES.get((source_format, lack), NO_FIX)
    where = "so no GPU work will have a layer of the model (at most a step or optimizer step)"
    return f"no layer: {LACKS[lack]}, {where}; fix: {fix}"
