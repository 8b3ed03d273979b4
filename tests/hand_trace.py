"""A small builder of hand-made normalized traces for the findings rules: ranges, launches (an API call and the
kernel or copy it launched, linked by correlation id), devices and trace_meta, written with the store's own
TraceWriter so that every view reads them as it reads a real trace.  Times are plain integers (ns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from pipeline.normalize.nesting import with_nesting
from pipeline.store import TraceWriter

PID, TID = 100, 1


@dataclass
class HandTrace:
    trace_id: str = "hand"
    #: the device's compute capability, SMs and name (the architecture table fills the other limits)
    cc: tuple[int, int] = (9, 0)
    sm_count: int = 132
    gpu: str = "NVIDIA H100 80GB HBM3"
    meta: dict = field(default_factory=dict)
    kernels: list[dict] = field(default_factory=list)
    copies: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    ranges: list[dict] = field(default_factory=list)

    def range(self, text: str, start: int, end: int, tid: int = TID, kind: str = "push_pop") -> None:
        self.ranges.append(
            {"text": text, "start_ns": start, "end_ns": end, "pid": PID, "tid": tid, "end_tid": tid, "kind": kind}
        )

    @staticmethod
    def _gpu_op(corr: int, start: int, duration: int) -> dict:
        """The columns a kernel and a copy share: device, stream, launch link and GPU interval."""
        return {
            "device_id": 0,
            "stream_id": 7,
            "correlation_id": corr,
            "start_ns": start,
            "end_ns": start + duration,
            "duration_ns": duration,
            "pid": PID,
        }

    def _call(self, at: int, call_ns: int, tid: int, name: str) -> int:
        corr = len(self.calls) + 1
        self.calls.append(
            {
                "kind": "runtime",
                "name": name,
                "start_ns": at,
                "end_ns": at + call_ns,
                "duration_ns": call_ns,
                "correlation_id": corr,
                "pid": PID,
                "tid": tid,
            }
        )
        return corr

    def kernel(
        self,
        name: str,
        start: int,
        duration: int,
        launch_at: int,
        *,
        call_ns: int = 1_000,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        regs: int = 32,
        smem: int = 0,
        tid: int = TID,
        graph_node_id: int | None = None,
    ) -> None:
        """A kernel ``name`` running [start, start + duration), launched by a call at ``launch_at`` on ``tid``."""
        corr = self._call(launch_at, call_ns, tid, "cudaLaunchKernel")
        self.kernels.append(
            {
                **self._gpu_op(corr, start, duration),
                "name": name,
                "short_name": name,
                "grid_x": grid[0],
                "grid_y": grid[1],
                "grid_z": grid[2],
                "block_x": block[0],
                "block_y": block[1],
                "block_z": block[2],
                "registers_per_thread": regs,
                "static_smem_bytes": smem,
                "dynamic_smem_bytes": 0,
                "graph_node_id": graph_node_id,
                "tid": tid,
            }
        )

    def memcpy(
        self,
        start: int,
        duration: int,
        launch_at: int,
        nbytes: int,
        src: str = "Pageable",
        kind: str = "Host-to-Device",
    ) -> None:
        corr = self._call(launch_at, 1_000, TID, "cudaMemcpyAsync")
        dst = "Device" if kind == "Host-to-Device" else "Pageable"
        self.copies.append(
            {**self._gpu_op(corr, start, duration), "bytes": nbytes, "kind": kind, "src_kind": src, "dst_kind": dst}
        )

    def write(self, out: Path) -> Path:
        with TraceWriter(out, self.trace_id) as w:
            w.write("kernels", pa.Table.from_pylist([{"kernel_id": i, **k} for i, k in enumerate(self.kernels)]))
            if self.copies:
                w.write("memcpy", pa.Table.from_pylist([{"copy_id": i, **c} for i, c in enumerate(self.copies)]))
            w.write("api_calls", pa.Table.from_pylist([{"call_id": i, **c} for i, c in enumerate(self.calls)]))
            if self.ranges:
                order = sorted(self.ranges, key=lambda r: (r["start_ns"], -r["end_ns"]))
                rows = [{"range_id": i, "source": "nvtx", **r} for i, r in enumerate(order)]
                w.write("nvtx_ranges", with_nesting(pa.Table.from_pylist(rows)))
            w.write(
                "devices",
                pa.Table.from_pylist(
                    [
                        {
                            "device_id": 0,
                            "name": self.gpu,
                            "compute_major": self.cc[0],
                            "compute_minor": self.cc[1],
                            "sm_count": self.sm_count,
                        }
                    ]
                ),
            )
            w.write("trace_meta", pa.Table.from_pylist([{"source_format": "nsys-sqlite", **self.meta}]))
            w.commit()
        return out
