"""What a PyTorch profiler chrome trace's events mean in our schema: data only, read by both decode paths.

Every profiler generation and vendor names the same things differently (PyTorch 1.8-1.10 Kineto wrote
``Kernel`` / ``Runtime`` / ``Operator`` and ``external id``; ROCm builds write HIP calls as
``cuda_runtime``; newer Kineto adds categories we do not model).  Supporting another one means adding a
row here: ``chrome_decode`` builds its msgspec Structs and column passes from these tables, and
``chrome`` builds our tables from the groups they name.  No code branches on a category or an arg name.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

#: A chrome-trace ``cat`` as written by any profiler version or vendor -> the group of events it feeds.
#: Groups are the modern Kineto names; each becomes one of our tables (see ``pipeline.normalize.chrome``).
CATEGORIES: dict[str, str] = {
    # modern Kineto (PyTorch >= 1.11), CUDA and ROCm alike (ROCm builds write HIP calls as cuda_runtime)
    "kernel": "kernel",
    "cuda_runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "cpu_op": "cpu_op",
    "python_function": "python_function",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "gpu_memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    # PyTorch 1.8-1.10 Kineto
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Operator": "cpu_op",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "gpu_user_Annotation": "gpu_user_annotation",  # Kineto's spelling until 2021
    # vendor runtimes that launch work like the CUDA runtime does
    "hip_runtime": "cuda_runtime",
    "hip_driver": "cuda_driver",
}

#: Categories every Kineto writes that no table needs, and why: not counted as "not modelled".
#: Any other category is counted by name in a warning (MTIA, privateuse1 devices, future ones).
KNOWN_UNUSED: dict[str, str] = {
    "ac2g": "flow arrows CPU -> GPU (the same link as correlation ids)",
    "async_cpu_to_gpu": "flow arrows CPU -> GPU of PyTorch ~2.0 (named async_gpu: the same link as correlation ids)",
    "async": "flow arrows of PyTorch 1.8-1.10 (the same link as correlation ids)",
    "fwdbwd": "flow arrows forward -> backward (sequence numbers carry the same link)",
    "Trace": "the profiler's own span",
    "overhead": "the profiler's own overhead",
    "cpu_instant_event": "memory allocation instants (profile_memory)",
    "external_correlation": "correlation records, already inlined into args",
    "cuda_sync": "synchronization waits",
    "cuda_profiler_range": "cudaProfilerStart/Stop spans",
    "tracepipe_counter": "per-layer counters of `tracepipe export perfetto`, derived from the GPU ops",
}

#: Events without a ``cat`` (other than metadata, ``ph: "M"``) that Kineto writes, by the start of their name:
#: not counted either.  Any other event without a category is counted under its name.
KNOWN_UNCATEGORIZED: dict[str, str] = {
    "Iteration Start: ": "the profiler's own marker, its trace name after the colon ('PyTorch Profiler' unless set)",
    "Record Window End": "the profiler's own marker",
    "[memory]": "memory allocation instants of PyTorch 1.8-1.10 (profile_memory)",
}

#: Events without a category whose ``pid`` names the writer: counted as one group, not name by name (an export
#: of the legacy autograd profiler without CUDA has no flow arrows, only these rows: a real one of 1,442 ops).
UNCATEGORIZED_BY_PID: dict[str, str] = {
    "CPU functions": "(no category) 'CPU functions' rows",
    "CUDA functions": "(no category) 'CUDA functions' rows",
}
_LEGACY_AUTOGRAD = (
    "the legacy autograd profiler's export (PyTorch <= 1.7: 'CPU functions' / 'CUDA functions' rows linked by "
    "flow arrows, without correlation ids or launch shapes); profile with torch.profiler (PyTorch >= 1.8) instead"
)
#: Categories (and groups of uncategorized rows, above) only another writer's chrome traces have -> what wrote the
#: file and what to do instead: the error for a file with nothing this reader models says it.
_BROWSER = (
    "Chrome's DevTools (a web page's performance trace: no GPU kernels of a model); profile the model with "
    "torch.profiler and export_chrome_trace"
)
OTHER_WRITERS: dict[str, str] = {
    "cpu_to_cuda": _LEGACY_AUTOGRAD,
    **dict.fromkeys(UNCATEGORIZED_BY_PID.values(), _LEGACY_AUTOGRAD),
    **dict.fromkeys(("devtools.timeline", "disabled-by-default-devtools.timeline"), _BROWSER),
}
#: Top-level keys of other tools' JSON files (no ``traceEvents``; every key of the tuple present) -> what the file
#: is and what to do instead: the error for such a file says it (each from a real file of another project's tests,
#: tests/bad_inputs/real/).
OTHER_JSON_FILES: dict[tuple[str, ...], str] = {
    ("rocprofiler-sdk-tool",): "it is rocprofv3's JSON output (rocprofiler-sdk), which this reader does not read; "
    "profile the model with torch.profiler (a ROCm build records the HIP kernels in its trace)",
    ("schema", "nodes", "finish_ts"): "it is a PyTorch execution trace (ExecutionTraceObserver, Chakra): ops and "
    "tensors, no GPU kernels; record the same run with torch.profiler and export_chrome_trace (the kernels' trace)",
}
#: Other tools' JSON arrays, by the keys of their first item: what the file is and what to record instead.
OTHER_JSON_ARRAYS: dict[tuple[str, ...], str] = {
    ("children", "frame", "metrics"): "it is a Triton proton profile (.hatchet: a tree of frames with metrics), no "
    "trace events; record the model with torch.profiler and export_chrome_trace (Triton kernels are in its trace)",
}
#: The fix said when no category points at another writer.
RECORD_WITH_KINETO = (
    "record with torch.profiler.profile(activities=[CPU, CUDA]) and export_chrome_trace (with a schedule, export "
    "in on_trace_ready: each finished cycle's events go there, and an export after the with block can be empty)"
)

#: Ranges PyTorch itself opens with ``record_function``, by name (a regular expression): PyTorch 1.8-1.10
#: wrote them as ``Operator`` events, today's profiler as ``user_annotation``.  Such ``cpu_op`` events are
#: ranges, not ops (steps, the optimizer's pass and layer paths then read the same in every generation).
#: A user's own ``record_function`` label in those versions is an ``Operator`` too, but nothing in the
#: event tells it from an op: it stays an op.
RANGES_WRITTEN_AS_OPS: dict[str, str] = {
    r"^ProfilerStep#\d+$": "torch.profiler's step (schedule step N)",
    r"^Optimizer\.(step|zero_grad)#.+$": "torch.optim's step and zero_grad (Optimizer.step#SGD.step)",
    r"^enumerate\(DataLoader\)#.+$": "a DataLoader iterator's __next__",
}

#: ``python_function`` events that are module calls: with ``with_stack=True`` the profiler's Python tracer names
#: every ``nn.Module`` call ``nn.Module: <Class>_<n>`` (n numbers the instances of a class in order of first
#: call).  They are layer ranges: ``nvtx_ranges`` rows of source ``nn.Module`` whose text is ``<Class>_<n>``,
#: nesting with ``record_function`` ranges (``ProfilerStep#N`` included) by time on their thread.
MODULE_FRAME_PREFIXES: tuple[str, ...] = ("nn.Module: ",)

#: The top-level key ``tracepipe capture`` writes into its PyTorch traces (``profile.add_metadata``): such a trace's
#: module ranges (qualified names, ``layer1.0.conv1``) are its layers, and module frames it may also hold are not
#: (they would repeat each level under another name).
CAPTURE_MARK = "tracepipe_capture"

#: ``record_function`` ranges PyTorch opens around work it runs, which mark that work and are no layer: they are
#: written to ``ops`` (a kernel launched inside then keeps the module around it as its layer).
RANGES_THAT_ARE_OPS: dict[str, str] = {
    r"^## Call CompiledFxGraph \S+ ##$": "Inductor's call of one compiled graph (named by its FX graph cache key)",
    # ~110 a compile (torch 2.11 and 2.13 alike): `dynamo_data: compile_id=0/0`, `GraphLowering.run_data: ...`
    r"^\S+_data: (.+, )?compile_id=[^,]+(, .+)?$": "torch.compile's compile-phase events "
    "(CompileEventLogger.add_record_function_data: `<event>_data: compile_id=1/0`)",
}

#: Top-level keys holding the device list: ``deviceProperties`` since 2021, ``computeProperties`` in the
#: Kineto of PyTorch 1.8 (the first one found wins).
DEVICE_KEYS: tuple[str, ...] = ("deviceProperties", "computeProperties")

#: ``devices`` column -> the keys of a device object that hold it, first found wins (``computeProperties``
#: used CUDA's cudaDeviceProp names: ``major``, ``multiProcessorCount``, ``maxThreadsPerMultiProcessor``).
DEVICE_FIELDS: dict[str, tuple[str, ...]] = {
    "device_id": ("id",),
    "name": ("name",),
    "compute_major": ("computeMajor", "major"),
    "compute_minor": ("computeMinor", "minor"),
    "sm_count": ("numSms", "multiProcessorCount"),
    "warp_size": ("warpSize",),
    "max_threads_per_sm": ("maxThreadsPerMultiprocessor", "maxThreadsPerMultiProcessor"),
    "max_registers_per_sm": ("regsPerMultiprocessor",),
    "max_registers_per_block": ("regsPerBlock",),
    "max_shared_mem_per_sm_bytes": ("sharedMemPerMultiprocessor",),
    "max_shared_mem_per_block_bytes": ("sharedMemPerBlock",),
    "max_shared_mem_per_block_optin_bytes": ("sharedMemPerBlockOptin",),
    "max_threads_per_block": ("maxThreadsPerBlock",),
    "total_memory_bytes": ("totalGlobalMem",),
}

ArgKind = Literal["int", "float", "json", "xyz"]


class Arg(NamedTuple):
    """One column taken from an event's ``args``: its kind and the key names that hold it, first found wins.

    ``int``: int64 (a JSON integer); ``float``: float64; ``json``: the value's JSON text as written;
    ``xyz``: a 3-element list spread over ``<column>_x/_y/_z`` (int32).
    """

    kind: ArgKind
    names: tuple[str, ...]


def _int(*names: str) -> Arg:
    return Arg("int", names)


_EXTERNAL = {"external_id": _int("External id", "external id")}
_LAUNCHED = {"correlation_id": _int("correlation"), **_EXTERNAL}
_ON_DEVICE = {"device_id": _int("device"), "context_id": _int("context"), "stream_id": _int("stream")}

#: group -> output column -> where its value is in ``args``.  A group without columns never decodes args.
COLUMNS: dict[str, dict[str, Arg]] = {
    "kernel": {
        **_ON_DEVICE,
        **_LAUNCHED,
        "registers_per_thread": _int("registers per thread"),
        "static_smem_bytes": _int("shared memory"),
        "profiler_blocks_per_sm": Arg("float", ("blocks per SM",)),
        "profiler_warps_per_sm": Arg("float", ("warps per SM",)),
        "profiler_est_achieved_occupancy_pct": Arg("float", ("est. achieved occupancy %",)),
        "grid": Arg("xyz", ("grid",)),
        "block": Arg("xyz", ("block",)),
    },
    "cuda_runtime": dict(_LAUNCHED),
    "cuda_driver": dict(_LAUNCHED),
    "cpu_op": {
        **_EXTERNAL,
        "sequence_number": _int("Sequence number"),
        "fwd_thread_id": _int("Fwd thread id"),
        # Kept as the original JSON text: the ops table stores them as JSON strings.
        "input_dims": Arg("json", ("Input Dims",)),
        "input_types": Arg("json", ("Input type",)),
    },
    "python_function": {"python_id": _int("Python id"), "python_parent_id": _int("Python parent id")},
    "user_annotation": {},
    "gpu_user_annotation": {"device_id": _int("device"), "stream_id": _int("stream"), **_EXTERNAL},
    "gpu_memcpy": {**_ON_DEVICE, **_LAUNCHED, "bytes": _int("bytes")},
    "gpu_memset": {**_ON_DEVICE, **_LAUNCHED, "bytes": _int("bytes")},
}

#: The groups, in a fixed order (a group's index is its code in the decoders).
GROUPS: list[str] = list(COLUMNS)

#: Top-level keys naming the versions of the tools that wrote the trace -> how ``trace_meta`` labels them.
VERSION_KEYS: dict[str, str] = {
    "cupti_version": "cupti",
    "cuda_runtime_version": "cuda runtime",
    "cuda_driver_version": "cuda driver",
    "roctracer_version": "roctracer",
    "hip_runtime_version": "hip runtime",
    "hip_driver_version": "hip driver",
}

#: Kineto's memcpyKindString -> the CUPTI enum labels nsys exports (ENUM_CUDA_MEMCPY_OPER).
MEMCPY_KINDS: dict[str, str] = {
    "HtoD": "Host-to-Device",
    "DtoH": "Device-to-Host",
    "HtoA": "Host-to-Array",
    "AtoH": "Array-to-Host",
    "AtoA": "Array-to-Array",
    "AtoD": "Array-to-Device",
    "DtoA": "Device-to-Array",
    "DtoD": "Device-to-Device",
    "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer",
}
