"""``python -m pipeline.normalize.nsys_kernels SQLITE SHOWN OUT TRACE_ID STAGING``: the kernels table of one
nsys export, written into another process's staging folder (``nsys._kernels_writer`` starts it). The last
line on stdout is JSON ``["ok", [rows, counted]]`` (``counted``: the writer's check counts), ``["bad", reason]``
(a bad input) or ``["error", what]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.errors import BadInputError
from pipeline.lean import pyarrow_without_pandas
from pipeline.normalize.nsys import StagedWriter, write_kernels_in


def main(argv: list[str]) -> None:
    path, shown, out, trace_id, staging = argv
    pyarrow_without_pandas()  # pandas is never used here (0.35 CPU-s of import otherwise)
    writer = StagedWriter(out, trace_id, staging)
    try:
        result: list[object] = ["ok", [write_kernels_in(Path(path), Path(shown), writer), writer.counted]]
    except BadInputError as e:
        result = ["bad", e.reason]
    except Exception as e:  # said in the parent, as a tool failure
        result = ["error", f"{type(e).__name__}: {e}"]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
