"""The op names Inductor joins into a generated kernel's name (``triton_poi_fused__to_copy_add_mul_0``): data for the
view ``kernel_fused_ops``, which reads each name back into its ops.

``aten_op_names.txt`` lists the aten, prims and inductor op packets of torch 2.13 (``torch._C.
_dispatch_get_all_op_names()`` after importing Inductor, namespace and overload dropped), one per line: a name's
ops are split on the longest names of this list, since op names hold underscores themselves (``_to_copy``,
``nll_loss_backward``).  Regenerate it with a newer torch to know newer ops; a part of a name no entry matches
is read up to its next underscore.
"""

from __future__ import annotations

from importlib import resources

import pyarrow as pa

#: Inductor's kernel kinds, as the second word of a Triton kernel's name.
KINDS: dict[str, str] = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent reduction",
    "tem": "template",
    "for": "foreach",
    "sca": "scan",
    "spl": "split scan",
}


def op_names_table() -> pa.Table:
    """ATen, prims and Inductor op names (torch 2.13, one per row) that kernel_fused_ops splits Triton names on."""
    text = resources.files("pipeline.analyze").joinpath("aten_op_names.txt").read_text()
    return pa.table({"name": [line for line in text.splitlines() if line]})


def kernel_kinds_table() -> pa.Table:
    """Inductor's kernel kinds by the code in a Triton kernel's name (`poi` -> pointwise): code, kind."""
    return pa.table({"code": list(KINDS), "kind": list(KINDS.values())})
