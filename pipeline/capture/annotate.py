"""One range per ``nn.Module`` call, in NVTX (for nsys/ncu) and ``record_function`` (for the PyTorch trace).

Contract with the attribution views: the range text is exactly the module's
qualified name as ``named_modules()`` gives it (``layer1.0.conv1``); the root
module's range is ``root_name`` (default ``model``) and each measured iteration
is wrapped in a ``step`` range.  Nothing else goes into the text, so per-layer
rollups group on it directly.  Shapes, dtypes and MACs go to the side file
``layer_shapes.json`` (see ``LayerRecorder``), recorded in a forward pass
outside the capture window so the measured iterations carry no extra work.

NVTX alone does not reach the PyTorch chrome trace and ``record_function``
alone does not reach nsys (unless ``emit_nvtx``), hence both.  Every hook
returns ``None``: a forward pre-hook that returns a value replaces the
module's input.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pipeline.capture.macs import module_macs

Push = Callable[[str], None]
Pop = Callable[[], None]


class RangeBackend:
    """Opens and closes one named range on every profiler that should see it."""

    def __init__(self, use_nvtx: bool = True, use_record_function: bool = True) -> None:
        self.use_nvtx = use_nvtx
        self.use_record_function = use_record_function
        self._open: list[Any] = []
        if use_nvtx:
            import nvtx  # the `nvtx` package: a no-op unless a tool (nsys, ncu) is attached

            self._nvtx = nvtx
        if use_record_function:
            from torch.autograd.profiler import record_function

            self._record_function = record_function

    def push(self, name: str) -> None:
        if self.use_nvtx:
            self._nvtx.push_range(message=name, color=None)
        rf = None
        if self.use_record_function:
            rf = self._record_function(name)
            rf.__enter__()
        self._open.append(rf)

    def pop(self) -> None:
        if not self._open:
            return  # an unbalanced pop (a forward raised before its post-hook) must not raise again
        rf = self._open.pop()
        if rf is not None:
            rf.__exit__(None, None, None)
        if self.use_nvtx:
            self._nvtx.pop_range()

    @contextmanager
    def range(self, name: str) -> Iterator[None]:
        self.push(name)
        try:
            yield
        finally:
            self.pop()


def is_compiling_check() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (torch >= 2.3; ``torch._dynamo.is_compiling`` before): True while Dynamo
    traces a function.  Hooks test it first and do nothing then: Dynamo traces a module's hooks into the
    compiled graph, where a range push is no Python call at run time and the hooks' bookkeeping (a dict keyed by
    the module) breaks Dynamo's tracing (``... is already tracked for mutation``)."""
    import torch

    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None:
        dynamo = getattr(torch, "_dynamo", None)
        check = getattr(dynamo, "is_compiling", None)
    return check if check is not None else (lambda: False)


def unwrap_compiled(module: Any) -> Any:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) compiles, else ``module`` itself: its
    submodules then keep the names ``named_modules()`` gives them on the original (no ``_orig_mod.`` prefix),
    so an eager and a compiled capture of one model share one vocabulary of paths."""
    inner = getattr(module, "_orig_mod", None)
    return inner if inner is not None and type(module).__name__ == "OptimizedModule" else module


def name_depth(qualname: str) -> int:
    """0 for the root (``""``), 1 for ``layer1``, 3 for ``layer1.0.conv1``."""
    return 0 if not qualname else qualname.count(".") + 1


def _describe(x: Any) -> tuple[list[Any], list[str | None]]:
    """Shapes and dtypes of the tensors in ``x`` (nested tuples/lists flattened, non-tensors skipped)."""
    shapes: list[Any] = []
    dtypes: list[str | None] = []
    stack = [x]
    flat: list[Any] = []
    while stack:
        item = stack.pop()
        if isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    for item in flat:
        shape = getattr(item, "shape", None)
        if shape is None:
            continue
        shapes.append([int(d) for d in shape])
        dtype = getattr(item, "dtype", None)
        dtypes.append(str(dtype).removeprefix("torch.") if dtype is not None else None)
    return shapes, dtypes


@dataclass
class LayerCall:
    """One module call as ``layer_shapes.json`` records it (columns of the ``layer_shapes`` table)."""

    layer: str
    call_index: int
    call_seq: int
    depth: int
    parent: str | None
    parent_call_index: int | None
    module_type: str
    input_shapes: list[Any]
    input_dtypes: list[str | None]
    output_shapes: list[Any] = field(default_factory=list)
    output_dtypes: list[str | None] = field(default_factory=list)
    macs: int | None = None
    macs_inclusive: int = 0
    macs_complete: bool = True
    params: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class LayerRecorder:
    """Collects ``LayerCall`` rows while ``active``; children's MACs roll up into ``macs_inclusive``."""

    def __init__(self) -> None:
        self.active = False
        self.calls: list[LayerCall] = []
        self._stack: list[LayerCall] = []
        self._counts: dict[str, int] = {}

    def enter(self, module: Any, text: str, depth: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self.active:
            return
        shapes, dtypes = _describe((args, tuple(kwargs.values())))
        parent = self._stack[-1] if self._stack else None
        index = self._counts.get(text, 0)
        self._counts[text] = index + 1
        call = LayerCall(
            layer=text,
            call_index=index,
            call_seq=len(self.calls),
            depth=depth,
            parent=parent.layer if parent else None,
            parent_call_index=parent.call_index if parent else None,
            module_type=type(module).__name__,
            input_shapes=shapes,
            input_dtypes=dtypes,
            params=sum(int(p.numel()) for p in module.parameters()),
        )
        call._args = (args, kwargs)  # type: ignore[attr-defined]  # dropped in leave
        self.calls.append(call)
        self._stack.append(call)

    def leave(self, module: Any, output: Any) -> None:
        if not self.active or not self._stack:
            return
        call = self._stack.pop()
        args, kwargs = call.__dict__.pop("_args")
        call.output_shapes, call.output_dtypes = _describe(output)
        try:
            call.macs = module_macs(module, args, kwargs, output)
        except (ValueError, IndexError, TypeError, AttributeError):
            call.macs = None
        call.macs_inclusive += call.macs or 0
        # A module whose own count is unknown but whose children explain its work is still complete.
        has_children = any(True for _ in module.children())
        call.macs_complete = call.macs_complete and (call.macs is not None or has_children)
        if self._stack:
            parent = self._stack[-1]
            parent.macs_inclusive += call.macs_inclusive
            parent.macs_complete = parent.macs_complete and call.macs_complete


class ModelAnnotator:
    """Hooks on every module of one model (down to ``depth``) that open/close its named range.

    ``root_name`` is the text of the root module's range (``named_modules()``
    names the root ``""``, which is no usable range name).
    """

    def __init__(
        self,
        model: Any,
        backend: RangeBackend,
        root_name: str = "model",
        depth: int | None = None,
        recorder: LayerRecorder | None = None,
    ) -> None:
        self.backend = backend
        self.root_name = root_name
        self.recorder = recorder or LayerRecorder()
        self.handles: list[Any] = []
        self._root_handles: list[Any] = []
        self._compiling = is_compiling_check()
        tree = unwrap_compiled(model)
        for qualname, module in tree.named_modules():
            d = name_depth(qualname)
            if depth is not None and d > depth:
                continue
            text = qualname or root_name
            handles = [
                module.register_forward_pre_hook(self._pre(text, d), with_kwargs=True),
                module.register_forward_hook(self._post(), always_call=True),
            ]
            self.handles += handles
            if not qualname:
                self._root_handles = handles
        if tree is not model:
            self.annotate_wrapper(model)

    def annotate_wrapper(self, wrapper: Any) -> None:
        """The root's range around a ``torch.compile`` wrapper's call instead: the wrapper runs eagerly, while the
        model it wraps runs inside the compiled region, where hooks do nothing (see ``is_compiling_check``)."""
        for h in self._root_handles:
            h.remove()
        self._root_handles = [
            wrapper.register_forward_pre_hook(self._pre(self.root_name, 0), with_kwargs=True),
            wrapper.register_forward_hook(self._post(), always_call=True),
        ]
        self.handles += self._root_handles

    def _pre(self, text: str, depth: int) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._compiling():
                return None
            self.backend.push(text)
            self.recorder.enter(module, text, depth, args, kwargs)
            return None  # never replace the input

        return hook

    def _post(self) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
            if self._compiling():
                return None
            self.recorder.leave(module, output)
            self.backend.pop()
            return None  # never replace the output

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class BackwardHookRanges:
    """NVTX ranges around each module's backward, pushed/popped by module backward hooks on the autograd thread.

    The alternative to ``torch.autograd.profiler.emit_nvtx`` that ``--backward-ranges hooks`` measures (see
    docs/capture.md): the pre-hook fires when the gradient w.r.t. the module's output is ready and the
    post-hook when the gradients w.r.t. its inputs are, so a module whose inputs need no gradient (the root,
    an embedding fed token ids) closes at once instead of enclosing its children, and sibling branches may
    interleave.  Range text is the module's name, as in the forward.
    """

    def __init__(self, model: Any, root_name: str = "model", depth: int | None = None) -> None:
        import nvtx

        self._nvtx = nvtx
        self.handles: list[Any] = []
        for qualname, module in model.named_modules():
            if depth is not None and name_depth(qualname) > depth:
                continue
            text = qualname or root_name
            self.handles.append(module.register_full_backward_pre_hook(self._pre(text)))
            self.handles.append(module.register_full_backward_hook(self._post()))

    def _pre(self, text: str) -> Callable[..., None]:
        def hook(module: Any, grad_output: Any) -> None:
            self._nvtx.push_range(message=text, color=None)
            return None  # never replace the gradient

        return hook

    def _post(self) -> Callable[..., None]:
        def hook(module: Any, grad_input: Any, grad_output: Any) -> None:
            self._nvtx.pop_range()
            return None

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class GlobalAnnotator:
    """Annotates every module of a program we cannot see into (``tracepipe capture ... -- python script.py``).

    Global hooks see each module call but not its name.  Names are worked out
    on first sight: a module called while no annotated module is open is a
    root, named ``root_name`` for the first such model and ``<root_name>_<n>``
    for later ones (``model_1``...); all its submodules then get their
    ``named_modules()`` names, exactly as ``ModelAnnotator`` would give them.  A
    module first seen inside another one that does not own it (created on the
    fly, or shared between models) is named ``<parent>.<TypeName>``.
    """

    def __init__(
        self,
        backend: RangeBackend,
        root_name: str = "model",
        depth: int | None = None,
        recorder: LayerRecorder | None = None,
    ) -> None:
        import torch.nn.modules.module as mm

        self.backend = backend
        self.root_name = root_name
        self.depth = depth
        self.recorder = recorder or LayerRecorder()
        self.names: weakref.WeakKeyDictionary[Any, tuple[str, int]] = weakref.WeakKeyDictionary()
        self._open: list[bool] = []  # per call: did its pre-hook push a range
        self._roots = 0
        self._parents: list[str] = []  # texts of the open ranges, innermost last
        self._current_parent: str | None = None
        self._compiling = is_compiling_check()
        self.handles = [
            mm.register_module_forward_pre_hook(self._pre),
            mm.register_module_forward_hook(self._post, always_call=True),
        ]

    def _name(self, module: Any) -> tuple[str, int]:
        known = self.names.get(module)
        if known is not None:
            return known
        if not any(self._open):  # a new root: name its whole tree now
            root = self.root_name if self._roots == 0 else f"{self.root_name}_{self._roots}"
            self._roots += 1
            tree = unwrap_compiled(module)  # a torch.compile wrapper is named as the model it wraps
            self.names[module] = (root, 0)
            for qualname, sub in tree.named_modules():
                if sub not in self.names:
                    self.names[sub] = (qualname or root, name_depth(qualname))
            return self.names[module]
        parent = self._current_parent or self.root_name
        entry = (f"{parent}.{type(module).__name__}", name_depth(parent) + 1)
        self.names[module] = entry
        return entry

    def _pre(self, module: Any, args: tuple[Any, ...]) -> None:
        if self._compiling():  # traced into a compiled graph: a no-op there (see is_compiling_check)
            return None
        text, depth = self._name(module)
        if self.depth is not None and depth > self.depth:
            self._open.append(False)
            return None
        self.backend.push(text)
        self.recorder.enter(module, text, depth, args, {})
        self._open.append(True)
        self._parents.append(text)
        self._current_parent = text
        return None

    def _post(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self._compiling() or not self._open:
            return None
        if self._open.pop():
            self.recorder.leave(module, output)
            self.backend.pop()
            self._parents.pop()
            self._current_parent = self._parents[-1] if self._parents else None
        return None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class OptimizerRanges:
    """An ``optimizer`` range around every ``optimizer.step()`` of the process (torch's global optimizer step hooks,
    as the module hooks are global): a user's script gets its optimizer pass as ``capture --train`` gets it."""

    def __init__(self, backend: RangeBackend, text: str = "optimizer") -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.backend = backend
        self.text = text
        self.handles = [
            register_optimizer_step_pre_hook(self._pre),
            register_optimizer_step_post_hook(self._post),
        ]

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.backend.push(self.text)
        return None  # never replace the step's arguments

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.backend.pop()
        return None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
