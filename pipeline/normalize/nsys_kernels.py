"""The kernels table of one nsys export, in a process of its own (``nsys._kernels_writer`` starts it):

    python -m pipeline.normalize.nsys_kernels SQLITE SHOWN OUT TRACE_ID STAGING HALVES
        written as kernels.parquet into another process's staging folder (HALVES=1: reading the second half
        of the table in one more such process meanwhile)
    python -m pipeline.normalize.nsys_kernels --tail ROWID ARROW_FILE SQLITE SHOWN
        the kernels after rowid ROWID, joined but not numbered, into an Arrow IPC file

The last line on stdout is JSON ``["ok", rows]``, ``["bad", reason]`` (a bad input) or ``["error", what]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa

from pipeline.errors import BadInputError
from pipeline.normalize import nsys_raw
from pipeline.normalize.nsys import Sqlite, StagedWriter, _usable_tables, write_kernels_in


def write_tail(after: int, dest: Path, path: Path, shown: Path) -> int:
    db = Sqlite(path, shown)
    try:
        _usable_tables(db)
        rows, sink, schema = 0, None, None
        try:
            for batch in nsys_raw.kernel_batches(db, after=after):
                if sink is None:
                    schema = batch.schema
                    sink = pa.ipc.new_file(str(dest), schema)
                sink.write_batch(batch if batch.schema.equals(schema) else batch.cast(schema))
                rows += batch.num_rows
        finally:
            if sink is not None:
                sink.close()
        return rows
    finally:
        db.close()


def main(argv: list[str]) -> None:
    try:
        if argv[0] == "--tail":
            after, dest, path, shown = argv[1:]
            rows = write_tail(int(after), Path(dest), Path(path), Path(shown))
        else:
            path, shown, out, trace_id, staging, halves = argv
            writer = StagedWriter(out, trace_id, staging)
            rows = write_kernels_in(Path(path), Path(shown), writer, halves == "1")
        result: list[object] = ["ok", rows]
    except BadInputError as e:
        result = ["bad", e.reason]
    except nsys_raw.NotRaw as e:
        result = ["notraw", str(e)]
    except Exception as e:  # said in the parent, as a tool failure
        result = ["error", f"{type(e).__name__}: {e}"]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
