"""``compiled_kernels.json`` (written by ``tracepipe capture`` of a ``torch.compile``'d model) -> the table
``compiled_kernels``: per launch of each compiled graph, the modules it computes.

The file (``pipeline.capture.compiled``) holds, per graph Inductor compiled: its FX graph cache key, each post-grad
node's module chain and autograd sequence number, the text of its generated ``call()``, and Inductor's provenance
(the post-grad nodes each launch computes, by debug handle).  Here the launches are read off ``call()`` in order
(each statement that launches: a Triton kernel's ``.run(``, a C++ kernel's call, an extern call, with the comments
``Topologically Sorted Source Nodes: [...]`` and ``[Provenance debug handles] <kernel>:<n>`` before it), and each
launch gets its modules:

* its nodes: Inductor's provenance for its debug handle; without one (a torch without provenance tracking), the
  nodes its ``Source Nodes`` comment names (a forward node's Dynamo name is its ``from_node``);
* a node's module chain: its own ``nn_module_stack``; a backward node has none, and takes that of the forward nodes
  of the same compiled region with its autograd sequence number (PyTorch's own rule for backward metadata);
* the launch's module is its output's: that of the last of its nodes in the graph (the graph is in topological
  order), so a kernel fusing the residual add of ``blocks.0`` with ``blocks.0.norm`` is the norm's, and one that
  applies the rotary embedding (computed once, in ``model.rotary_emb``) to layer 3's queries is layer 3's
  attention's; a backward node's chain is the one its forward nodes share.  Every module it computes is listed
  too (``modules``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.normalize.source import side_file
from pipeline.schema import COMPILED_KERNELS
from pipeline.store import TraceWriter, trace_id_for

MARKER = "tracepipe_compiled"
SUPPORTED_VERSIONS = (2,)

#: A launch statement of a generated ``call()``: a Triton kernel's ``.run(``, a C++ kernel's call (CPU), or an
#: extern call, with the aten op the profiler names it by.
#: A statement may assign its result (``buf3 = torch.ops.aten._scaled_dot_product_cudnn_attention.default(...)``).
_ASSIGN = r"^\s*(?:[\w, ]+=\s*)?"
_TRITON = re.compile(_ASSIGN + r"(triton_\w+)\.run\(")
_CPP = re.compile(_ASSIGN + r"(cpp_fused_\w+)\(")
_EXTERN = re.compile(_ASSIGN + r"extern_kernels\.(\w+)\(")
_TORCH_OP = re.compile(_ASSIGN + r"torch\.ops\.(\w+)\.(\w+)\.\w+\(")
_SOURCE = re.compile(r"^\s*#\s*(?:Topologically Sorted|Unsorted) Source Nodes: \[(.*?)\], Original ATen: \[(.*?)\]")
_HANDLE = re.compile(r"^\s*#\s*\[Provenance debug handles\]\s*(\S+)")


@dataclass
class Statement:
    """One launch of a generated ``call()``, in order."""

    kind: str  # 'triton' | 'cpp' | 'extern'
    name: str  # kernel name, or the aten op of an extern call ('aten::mm')
    occurrence: int  # how many launches of this name came before it in the call
    handle: str | None  # Inductor's provenance debug handle ('triton_poi_fused_add_0:3'), when written
    source_nodes: list[str]  # the comment's source nodes (Dynamo names, or the node's own for backward nodes)
    original_aten: list[str]


_DEF = re.compile(r"^\s*def (call|partition_\d+)\(")
_PARTITION_CALL = re.compile(r"partitions\[(\d+)\]\(")


def _functions(code: str) -> dict[str, list[str]]:
    """The side file's generated functions (``call``, ``partition_<n>``) -> their body lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in code.splitlines():
        if m := _DEF.match(line):
            current = m.group(1)
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def _in_order(functions: dict[str, list[str]]) -> list[str]:
    """``call()``'s lines with each ``self.partitions[n](...)`` replaced by ``partition_<n>()``'s lines: the
    order the launches run in."""
    lines = []
    for line in functions.get("call", []):
        m = _PARTITION_CALL.search(line)
        if m and f"partition_{m.group(1)}" in functions:
            lines += functions[f"partition_{m.group(1)}"]
        else:
            lines.append(line)
    return lines


def call_statements(code: str) -> list[Statement]:
    """The launches of the generated ``call()`` (and the partitions it calls), in order, with the comments before
    each."""
    out: list[Statement] = []
    seen: dict[str, int] = {}
    sources: list[str] = []
    aten: list[str] = []
    handle: str | None = None
    for line in _in_order(_functions(code)):
        if m := _SOURCE.match(line):
            sources = [s.strip() for s in m.group(1).split(",")]
            aten = [a.strip() for a in m.group(2).split(",") if a.strip()]
            continue
        if m := _HANDLE.match(line):
            handle = m.group(1)
            continue
        kind = name = None
        if m := _TRITON.match(line):
            kind, name = "triton", m.group(1)
        elif m := _CPP.match(line):
            kind, name = "cpp", m.group(1)
        elif m := _EXTERN.match(line):
            kind, name = "extern", f"aten::{m.group(1)}"
        elif m := _TORCH_OP.match(line):
            kind, name = "extern", f"{m.group(1)}::{m.group(2)}"
        if kind is None or name is None:
            continue
        out.append(Statement(kind, name, seen.get(name, 0), handle, sources, aten))
        seen[name] = seen.get(name, 0) + 1
        sources, aten, handle = [], [], None
    return out


def common_chain(chains: list[list[str]]) -> list[str]:
    """The longest common prefix of module chains (outermost first): the innermost module they all sit in."""
    if not chains:
        return []
    out = []
    for names in zip(*chains, strict=False):
        if len(set(names)) != 1:
            break
        out.append(names[0])
    return out


def graph_kind(aot_name: str | None) -> str | None:
    """AOT's graph name (``0_forward``, ``1_backward``, ``2_inference``) -> forward | backward | inference."""
    if not aot_name:
        return None
    for kind in ("forward", "backward", "inference"):
        if aot_name.endswith(kind):
            return kind
    return None


def _chains_by_seq(graphs: list[dict[str, Any]]) -> dict[tuple[str | None, int], list[list[str]]]:
    """(compile id, sequence number) -> the module chains of the forward nodes with that number."""
    out: dict[tuple[str | None, int], list[list[str]]] = defaultdict(list)
    for g in graphs:
        for node in g.get("nodes", {}).values():
            if node.get("modules") and node.get("seq_nr") is not None:
                out[(g.get("compile_id"), node["seq_nr"])].append(node["modules"])
    return out


def launch_rows(doc: dict[str, Any], capture_id: str) -> list[dict[str, Any]]:
    graphs = doc.get("graphs") or []
    by_seq = _chains_by_seq(graphs)
    rows = []
    for g in graphs:
        nodes = g.get("nodes") or {}
        by_source: dict[str, list[str]] = defaultdict(list)  # a comment's source name -> node names
        for name, node in nodes.items():
            by_source[node.get("from_node") or name].append(name)
        order = {name: i for i, name in enumerate(nodes)}  # the graph's node order: topological
        provenance = g.get("provenance") or {}
        for index, launch in enumerate(call_statements(g.get("call") or "")):
            names = provenance.get(launch.handle or "")
            if names is None:
                names = [n for src in launch.source_nodes if src for n in by_source.get(src, [])]
            placed = []  # (the node's place in the graph, its module chain), for each node that has one
            listed: set[str] = set()  # every innermost module of the launch's nodes
            for name in names:
                node = nodes.get(name) or {}
                own = node.get("modules") or []
                if own:
                    placed.append((order.get(name, -1), own))
                    listed.add(own[-1])
                elif node.get("seq_nr") is not None:
                    from_forward = by_seq.get((g.get("compile_id"), node["seq_nr"]), [])
                    if from_forward:
                        placed.append((order.get(name, -1), common_chain(from_forward)))
                        listed |= {c[-1] for c in from_forward}
            chain = max(placed, key=lambda p: p[0])[1] if placed else []  # the output's: the last node in the graph
            innermost = sorted(listed)
            rows.append(
                {
                    "capture_id": capture_id,
                    "graph_key": g.get("key"),
                    "compile_id": g.get("compile_id"),
                    "graph": graph_kind(g.get("aot_graph")),
                    "launch_index": index,
                    "launch_kind": launch.kind,
                    "launch_name": launch.name,
                    "occurrence": launch.occurrence,
                    "handle": launch.handle,
                    "module": chain[-1] if chain else "",
                    "module_chain": json.dumps(chain),
                    "modules": json.dumps(innermost),
                    "nodes": len(names),
                    "original_aten": json.dumps(launch.original_aten),
                    "root_name": doc.get("root_name"),
                }
            )
    return rows


def normalize_compiled(path: Path, writer: TraceWriter) -> dict[str, object]:
    doc = side_file(path, MARKER, SUPPORTED_VERSIONS, "compiled_kernels")
    if not isinstance(doc.get("graphs"), list):
        raise BadInputError(path, "'graphs' must be a list of compiled graphs")
    capture_id = trace_id_for(path).rsplit(".", 1)[0]
    schema = COMPILED_KERNELS.remove(COMPILED_KERNELS.get_field_index("trace_id"))
    writer.write("compiled_kernels", pa.Table.from_pylist(launch_rows(doc, capture_id), schema=schema))
    problems = [str(p) for p in doc.get("problems") or []]
    return {
        "source_format": "compiled-kernels",
        "source_version": f"tracepipe compiled_kernels v{doc[MARKER]}; torch {doc.get('torch')}",
        "warnings": problems,
    }
