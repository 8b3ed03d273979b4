"""``layer_shapes.json`` (written by ``tracepipe capture``) -> the ``layer_shapes`` table.

The side file holds one row per module call of one forward pass: qualified
name (the exact NVTX / record_function range text), call index, module type,
input/output shapes and dtypes, analytic MACs and parameter count.  It is a
few hundred rows at most, so plain JSON decoding is the right tool.

``capture_id`` ties the rows to the traces of the same capture: it is the
capture folder's name, which is also the prefix of those traces' default
``trace_id`` (``<folder>.<file stem>``, see ``pipeline.store.trace_id_for``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.normalize.source import side_file
from pipeline.schema import LAYER_SHAPES
from pipeline.store import TraceWriter, trace_id_for

MARKER = "tracepipe_layers"
SUPPORTED_VERSIONS = (1,)
_REQUIRED = ("layer", "call_index", "module_type")
_JSON_COLUMNS = ("input_shapes", "input_dtypes", "output_shapes", "output_dtypes")


def _row(raw: dict[str, Any], capture_id: str, root: str | None) -> dict[str, Any]:
    row = {name: raw.get(name) for name in LAYER_SHAPES.names if name in raw}
    for col in _JSON_COLUMNS:  # nested lists stay JSON text: DuckDB reads them with json functions
        if col in row:
            row[col] = json.dumps(row[col], separators=(",", ":"))
    row["capture_id"] = capture_id
    row["root_name"] = root
    return row


def normalize_layers(path: Path, writer: TraceWriter) -> dict[str, object]:
    doc = side_file(path, MARKER, SUPPORTED_VERSIONS, "layer_shapes")
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise BadInputError(path, "'layers' must be a list of module calls")
    for i, raw in enumerate(layers):
        missing = [k for k in _REQUIRED if not isinstance(raw, dict) or raw.get(k) is None]
        if missing:
            raise BadInputError(path, f"layers[{i}] lacks {', '.join(missing)}")
    # Same rule as the traces' default ids, so `<capture_id>.nsys` etc. are its siblings.
    capture_id = trace_id_for(path).rsplit(".", 1)[0]
    rows = [_row(raw, capture_id, doc.get("root_name")) for raw in layers]
    schema = LAYER_SHAPES.remove(LAYER_SHAPES.get_field_index("trace_id"))
    writer.write("layer_shapes", pa.Table.from_pylist(rows, schema=schema))
    return {"source_format": "layer-shapes", "source_version": f"tracepipe layer_shapes v{doc[MARKER]}"}
