"""How each Nsight Systems export layout names things: data only, read by ``nsys`` when it builds queries.

nsys renames tables and columns between export schema versions (pre-2022 exports keep the CUDA device
properties in ``TARGET_INFO_CUDA_GPU`` and name the device ``deviceId``; 2022.2-2023.1 call the
metadata table ``EXPORT_META_DATA`` and spell ``ENUM_CUDA_KRENEL_LAUNCH_TYPE``; some have no enum tables
at all).  Supporting another layout means adding names here.
"""

from __future__ import annotations

#: A table as we refer to it -> the names it has had, newest first (the first one present is read).
TABLES: dict[str, tuple[str, ...]] = {
    "META_DATA_EXPORT": ("META_DATA_EXPORT", "EXPORT_META_DATA"),
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": ("ENUM_CUDA_KERNEL_LAUNCH_TYPE", "ENUM_CUDA_KRENEL_LAUNCH_TYPE"),
    "ENUM_CUDA_MEMCPY_OPER": ("ENUM_CUDA_MEMCPY_OPER",),
    "ENUM_CUDA_MEM_KIND": ("ENUM_CUDA_MEM_KIND",),
}

#: Labels of the enums nsys exports, as its own ``ENUM_*`` tables give them (nsys 2025.3), for exports
#: that carry no such table: the same capture then reads the same whatever the export's age.
ENUMS: dict[str, dict[int, str]] = {
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": {0: "Unknown", 1: "Regular", 2: "Coop Single Device", 3: "Coop Multi Device"},
    "ENUM_CUDA_MEMCPY_OPER": {
        0: "Unknown",
        1: "Host-to-Device",
        2: "Device-to-Host",
        3: "Host-to-Array",
        4: "Array-to-Host",
        5: "Array-to-Array",
        6: "Array-to-Device",
        7: "Device-to-Array",
        8: "Device-to-Device",
        9: "Host-to-Host",
        10: "Peer-to-Peer",
        11: "Unified Host-to-Device",
        12: "Unified Device-to-Host",
        13: "Unified Device-to-Device",
    },
    "ENUM_CUDA_MEM_KIND": {
        0: "Pageable",
        1: "Pinned",
        2: "Device",
        3: "Array",
        4: "Managed",
        5: "Device Static",
        6: "Managed Static",
        7: "Unknown",
    },
}

#: The GPU tables: modern exports have one (``TARGET_INFO_GPU``); pre-2022 ones split it in two, joined
#: on the CUDA device ordinal.
GPU_TABLE, CUDA_GPU_TABLE = "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"

#: devices column -> the columns that hold it, as (table, column), any layout; the first non-null wins.
#: Only unit-free or byte-valued properties are taken from the pre-2022 table (its clock and bandwidth
#: units are not documented).
DEVICE_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "device_id": ((GPU_TABLE, "cuDevice"), (GPU_TABLE, "id"), (GPU_TABLE, "deviceId"), (CUDA_GPU_TABLE, "deviceId")),
    "name": ((GPU_TABLE, "name"), (CUDA_GPU_TABLE, "name")),
    "compute_major": ((GPU_TABLE, "computeMajor"), (CUDA_GPU_TABLE, "computeCapabilityMajor")),
    "compute_minor": ((GPU_TABLE, "computeMinor"), (CUDA_GPU_TABLE, "computeCapabilityMinor")),
    "sm_count": ((GPU_TABLE, "smCount"), (CUDA_GPU_TABLE, "numMultiprocessors")),
    "warp_size": ((GPU_TABLE, "threadsPerWarp"), (CUDA_GPU_TABLE, "numThreadsPerWarp")),
    "max_warps_per_sm": ((GPU_TABLE, "maxWarpsPerSm"), (CUDA_GPU_TABLE, "maxWarpsPerMultiprocessor")),
    "max_blocks_per_sm": ((GPU_TABLE, "maxBlocksPerSm"), (CUDA_GPU_TABLE, "maxBlocksPerMultiprocessor")),
    "max_registers_per_sm": ((GPU_TABLE, "maxRegistersPerSm"), (CUDA_GPU_TABLE, "maxRegistersPerMultiprocessor")),
    "max_registers_per_block": ((GPU_TABLE, "maxRegistersPerBlock"), (CUDA_GPU_TABLE, "maxRegistersPerBlock")),
    "max_shared_mem_per_sm_bytes": (
        (GPU_TABLE, "maxShmemPerSm"),
        (CUDA_GPU_TABLE, "maxSharedMemoryPerMultiprocessor"),
    ),
    "max_shared_mem_per_block_bytes": ((GPU_TABLE, "maxShmemPerBlock"), (CUDA_GPU_TABLE, "maxSharedMemoryPerBlock")),
    "max_shared_mem_per_block_optin_bytes": ((GPU_TABLE, "maxShmemPerBlockOptin"),),
    "max_threads_per_block": ((GPU_TABLE, "maxThreadsPerBlock"), (CUDA_GPU_TABLE, "maxThreadsPerBlock")),
    "l2_cache_bytes": ((GPU_TABLE, "l2CacheSize"), (CUDA_GPU_TABLE, "l2CacheSize")),
    "clock_hz": ((GPU_TABLE, "clockRate"),),
    "memory_bandwidth_bytes_per_s": ((GPU_TABLE, "memoryBandwidth"),),
    "total_memory_bytes": ((GPU_TABLE, "totalMemory"), (CUDA_GPU_TABLE, "globalMemorySize")),
}

#: Columns without which a table's rows mean nothing: a table lacking one is left out with a warning
#: (the kernel table is the exception: without it nothing is usable, a bad-input error).
REQUIRED: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid"),
    "CUPTI_ACTIVITY_KIND_DRIVER": ("start", "end", "globalTid"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end"),
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid"),
}

#: Tables of an nvprof database (`nvprof -o`, versions 11 and 12 of its layout), which no nsys export has (nsys
#: names strings in StringIds): such a file is refused naming nvprof.
NVPROF_TABLES = frozenset({"StringTable", "Version"})

#: CUDA API calls that launch GPU work, as LIKE patterns over the names nsys writes (with their ABI suffixes:
#: ``cudaLaunchKernel_v7000``), runtime and driver: counted when an export has calls but no kernel table.
LAUNCH_CALLS = ("cudaLaunch%", "cuLaunch%", "cudaGraphLaunch%", "cuGraphLaunch%")

#: How an export says its capture was asked to trace CUDA (``nsys profile -t cuda``, the default): a row of
#: ``META_DATA_CAPTURE`` (2023.3 on; older exports have no such table and do not say). With it and no CUDA API
#: call recorded, the program made none (nsys's own diagnostic: "No CUDA events collected. Does the process use
#: CUDA?"), which "record with -t cuda" would not mend (two real exports of 2025.3 and 2025.6).
CUDA_TRACED = ("META_DATA_CAPTURE", "CAPTURE_EVENT_TYPE", "Cuda")

#: Name prefixes of the tables only an Nsight Systems export has (every layout since before 2022): a database with
#: none of them is some other program's SQLite file, not a capture without kernels.
NSYS_TABLE_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "TARGET_INFO_", "META_DATA_", "OSRT_", "CUDA_GRAPH_")

#: Columns we read that older layouts do not have yet: their absence is expected, not warned about.
ADDED_LATER: dict[tuple[str, str], str] = {
    ("CUPTI_ACTIVITY_KIND_KERNEL", "graphId"): "export schema 3.25 (nsys 2026.2)",
    ("CUPTI_ACTIVITY_KIND_KERNEL", "mangledName"): "export schema 2.9 (nsys 2022.2)",
    ("NVTX_EVENTS", "textId"): "nsys 2021",
    ("NVTX_EVENTS", "domainId"): "nsys 2021",
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "graphNodeId"): "CUDA graph node tracing (nsys --cuda-graph-trace=node)",
    ("CUPTI_ACTIVITY_KIND_MEMSET", "graphNodeId"): "CUDA graph node tracing (nsys --cuda-graph-trace=node)",
    ("CUPTI_ACTIVITY_KIND_KERNEL", "graphNodeId"): "CUDA graph node tracing (nsys --cuda-graph-trace=node)",
    ("CUDA_GRAPH_NODE_EVENTS", "originalGraphNodeId"): "CUDA graph node tracing",
    ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "graphExecId"): "CUDA graph tracing",
}

#: ``nsys profile --pytorch=functions-trace`` records the PyTorch functions it traces as NVTX ranges of this domain
#: (``torch.nn.modules.Module.__call__``, ``torch.nn.functional.linear``, ``torch.optim.AdamW.step`` ...).
PYTORCH_DOMAIN = "PyTorch"
#: Its ranges of a module's ``forward`` (``torch.nn.modules.Linear.forward``: nsys traces torch's own module
#: classes, named by class, never a user's) are layer ranges named by the class (group 1); its other ranges are
#: function calls, written to ``ops`` (an optimizer's ``torch.optim.<Class>.step`` makes the `optimizer` pass).
PYTORCH_MODULE_FORWARD = r"^torch\.nn\.modules\.(\w+)\.forward$"
#: ``nvtx_ranges.source`` of such module ranges (their domain is then the default one, where layers live).
PYTORCH_MODULE_SOURCE = "nsys --pytorch"
