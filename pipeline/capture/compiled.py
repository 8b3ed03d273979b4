"""Which modules each kernel of a ``torch.compile``'d model computes: the side file ``compiled_kernels.json``.

Inside a compiled region no module hook runs: Dynamo traces the hooks into its graph, and Inductor fuses the
work of several modules into one kernel.  Inductor itself knows the mapping, and this recorder reads it as the
capture compiles, in the capture's own process:

1. every post-grad graph Inductor compiles (the forward and the backward of each region), through Inductor's
   ``post_grad_custom_post_pass`` hook, which changes nothing: each node's name, the ``nn_module_stack`` Dynamo
   gave it (forward nodes) and its autograd sequence number (a backward node has no module stack; the forward
   nodes of its sequence number give it one, as PyTorch's own ``copy_fwd_metadata_to_bw_nodes`` does);
2. each graph's generated ``call()``, from Inductor's structured log (``inductor_output_code``, the record
   TORCH_TRACE and tlparse read), kept as text: it launches kernels and extern calls in order, each after the
   comments ``Topologically Sorted Source Nodes: [...]`` and ``[Provenance debug handles] <kernel>:<n>``, and
   normalize reads the launches off it (a better reading then applies to old captures too);
3. Inductor's provenance of each launch (``config.trace.provenance_tracking_level = 1``, torch >= 2.9; its
   ``provenance_tracking`` in 2.8; before, the comments' source nodes stand in): the
   post-grad nodes each kernel and extern call computes, keyed by that debug handle;
4. the graph's FX graph cache key (the structured log's ``fx_graph_cache_miss`` record), which is how a trace names
   the graph: PyTorch's profiler and emit_nvtx wrap each call of it in ``## Call CompiledFxGraph <key> ##``.

Normalize (``pipeline.normalize.compiled``) reads the file into the table ``compiled_kernels``: a launch is
(graph key, launch name, occurrence), the k-th launch of a kernel name (or of an extern call's aten op,
``extern_kernels.mm`` -> ``aten::mm``) in one call of the graph, and its modules are those of its nodes, each a
chain of qualified names from the compiled module down (``blocks.0``, ``blocks.0.fc1``).  The attribution joins
kernels to it.

Only the capture imports torch; every torch name used here is looked up defensively, so a torch without one of
these hooks records less (a warning in the file), never breaks the user's run.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPILED_FILE = "compiled_kernels.json"
COMPILED_FORMAT_VERSION = 2

#: A Dynamo source of a module (``L['self'].blocks[0].fc1``, ``L['self']._modules['blocks']._modules['0']``):
#: its root, then its attribute steps.
_ROOT = re.compile(r"^[LG]\[['\"]([^'\"]+)['\"]\]")
_STEP = re.compile(r"\._modules\[['\"]([^'\"]+)['\"]\]|\[['\"]([^'\"]+)['\"]\]|\[(\d+)\]|\.(\w+)")


def qualified_name(source: str) -> str:
    """``L['self'].blocks[0].fc1`` -> ``blocks.0.fc1`` (the root module itself -> ``""``)."""
    m = _ROOT.match(source)
    rest = source[m.end() :] if m else source
    return ".".join(next(g for g in step.groups() if g is not None) for step in _STEP.finditer(rest))


def module_chain(stack: Any) -> list[str]:
    """A node's ``nn_module_stack`` (key -> (source, type), outermost first) -> qualified names, root left out."""
    names = []
    for value in (stack or {}).values():
        source = value[0] if isinstance(value, tuple) else value
        name = qualified_name(str(source))
        if name:
            names.append(name)
    return names


#: The functions of a generated module that launch work: ``call()``, and under CUDA graph partitioning (cudagraph
#: trees, ``mode="reduce-overhead"``) the ``partition_<n>()`` functions it calls through ``self.partitions[n]``.
_LAUNCHING_DEF = re.compile(r"^([ \t]*)def (call|partition_\d+)\(", re.M)


def call_function(code: str) -> str:
    """The text of the generated module's ``call()`` and ``partition_<n>()`` functions (their launches and the
    comments before each), where normalize reads the launches from; the kernels' own source, which is most of the
    module, is left out."""
    parts = []
    for m in _LAUNCHING_DEF.finditer(code):
        indent = len(m.group(1).expandtabs())
        lines = code[m.start() :].splitlines()
        end = next(
            (i for i, line in enumerate(lines[1:], 1) if line.strip() and len(line) - len(line.lstrip()) <= indent),
            len(lines),
        )
        parts.append("\n".join(lines[:end]))
    return "\n".join(parts)


@dataclass
class Graph:
    """One graph Inductor compiled: its nodes' modules, its launches, its key."""

    compile_id: str | None = None
    aot_name: str | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {modules, seq_nr, from_node}
    call: str = ""  # the generated call(), launches in order
    provenance: dict[str, list[str]] = field(default_factory=dict)  # debug handle -> post-grad node names
    key: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "compile_id": self.compile_id,
            "aot_graph": self.aot_name,
            "nodes": self.nodes,
            "call": self.call,
            "provenance": self.provenance,
        }


class CompiledKernelRecorder:
    """Records every graph Inductor compiles in this process (install before the first compile)."""

    def __init__(self) -> None:
        self.graphs: list[Graph] = []
        self.pending: list[Graph] = []  # graphs whose post-grad pass ran, waiting for their code and key
        self.problems: list[str] = []

    # --- hooks -------------------------------------------------------------------------------------------

    def install(self) -> None:
        try:
            import torch._inductor.config as inductor_config
            from torch._inductor.custom_graph_pass import CustomGraphPass
            from torch._logging._internal import trace_log
        except ImportError as e:  # a torch without Inductor's hooks: nothing to record
            self.problems.append(f"not recorded: this torch lacks Inductor's hooks ({e})")
            return
        trace = getattr(inductor_config, "trace", None)
        if trace is not None and hasattr(trace, "provenance_tracking_level"):  # torch >= 2.9
            trace.provenance_tracking_level = 1
        elif trace is not None and hasattr(trace, "provenance_tracking"):  # its name in torch 2.8
            trace.provenance_tracking = True
        else:
            self.problems.append("Inductor has no provenance tracking here: launches are mapped by their comments")
        recorder = self
        previous = getattr(inductor_config, "post_grad_custom_post_pass", None)

        class _RecordNodes(CustomGraphPass):  # type: ignore[misc]
            """Reads the post-grad graph's nodes; changes nothing (and runs the pass it replaced)."""

            def __call__(self, graph: Any) -> None:
                if previous is not None:
                    previous(graph)
                recorder.on_post_grad_graph(graph)

            def uuid(self) -> Any:  # a uuid keeps the graph cacheable, so Inductor computes (and logs) its key
                before = previous.uuid() if previous is not None and hasattr(previous, "uuid") else None
                return f"tracepipe-record-nodes-v1:{before}"

        inductor_config.post_grad_custom_post_pass = _RecordNodes()
        handler = _LogHandler(self)
        handler.setLevel(logging.DEBUG)
        trace_log.addHandler(handler)
        trace_log.setLevel(logging.DEBUG)

    def on_post_grad_graph(self, graph: Any) -> None:
        try:
            from torch._guards import CompileContext, TracingContext

            context = TracingContext.try_get()
            aot = getattr(context, "aot_graph_name", None) if context is not None else None
            g = Graph(compile_id=str(CompileContext.current_compile_id()), aot_name=",".join(aot) if aot else None)
            for node in graph.nodes:
                if node.op != "call_function":
                    continue
                origin = node.meta.get("from_node")
                g.nodes[node.name] = {
                    "modules": module_chain(node.meta.get("nn_module_stack")),
                    "seq_nr": node.meta.get("seq_nr"),
                    "from_node": getattr(origin[0], "name", None) if origin else None,
                    "backward": node.meta.get("partitioner_tag") == "is_backward",
                }
            self.pending.append(g)
        except Exception as e:  # never break the user's compile
            self.problems.append(f"a post-grad graph was not read: {e!r}")

    def on_output_code(self, code: str) -> None:
        if not self.pending:
            return
        g = self.pending[-1]
        g.call = call_function(code)
        try:
            import torch._inductor.debug as inductor_debug

            # Inductor keeps the provenance of the graph it is compiling (it starts afresh for each graph)
            info = getattr(inductor_debug, "_inductor_triton_kernel_to_post_grad_node_info", None) or {}
            g.provenance = {str(k): [str(n) for n in v] for k, v in info.items()}
        except Exception as e:
            self.problems.append(f"Inductor's provenance was not read: {e!r}")

    def on_cache_key(self, key: str | None) -> None:
        if not self.pending:
            return
        g = self.pending.pop()
        g.key = key
        self.graphs.append(g)

    # --- output ------------------------------------------------------------------------------------------

    def document(self, capture_id: str, root_name: str) -> dict[str, Any]:
        import torch

        return {
            "tracepipe_compiled": COMPILED_FORMAT_VERSION,
            "capture_id": capture_id,
            "root_name": root_name,
            "torch": torch.__version__,
            "graphs": [g.as_dict() for g in self.graphs + self.pending],
            "problems": self.problems,
        }

    def write(self, out: Path, capture_id: str, root_name: str) -> Path | None:
        if not (self.graphs or self.pending):
            return None
        path = out / COMPILED_FILE
        path.write_text(json.dumps(self.document(capture_id, root_name)) + "\n")
        return path


class _LogHandler(logging.Handler):
    """Takes from Inductor's structured log (``torch._logging.trace_structured``) the two records needed."""

    def __init__(self, recorder: CompiledKernelRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        try:
            metadata = getattr(record, "metadata", None) or {}
            if "inductor_output_code" in metadata:
                self.recorder.on_output_code(str(getattr(record, "payload", "") or ""))
                return
            artifact = metadata.get("artifact") or {}
            if str(artifact.get("name", "")).startswith("fx_graph_cache_"):
                payload = json.loads(getattr(record, "payload", None) or "{}")
                self.recorder.on_cache_key(payload.get("key"))
        except Exception as e:  # a log handler must never raise into the compile
            self.recorder.problems.append(f"a structured log record was not read: {e!r}")
