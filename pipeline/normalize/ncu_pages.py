"""Which Nsight Compute page a CSV is, from its header: light enough for format detection (no polars)."""

from __future__ import annotations

#: ncu CSV exports without a per-launch table: a header cell that names the export -> how the user made it.
#: ``raw`` and ``details`` pages start with "ID","Process ID"; these do not, and the normalizer says which export it
#: got. ``--print-summary`` (per-kernel, per-gpu, per-nvtx) folds the launches into Minimum/Maximum/Average rows of
#: its ``Invocations``.
OTHER_PAGES: dict[str, str] = {
    "Address": "--page source",
    "Source": "--page source",
    "Attribute": "--page session",
    "Device Name": "--page session",
    "Launch Settings": "--page session",
    "Session": "--page session",
    "Start Time": "--page session",
    "Process": "--page session",
    "Invocations": "--print-summary",
}
EXPORT_HINT = "export a page we read: ncu -i REPORT.ncu-rep --csv --page raw > FILE.csv (or --page details)"


def other_page(csv_bytes: bytes) -> str | None:
    """The ncu export a CSV table without launch rows comes from (``--page session``...), by the cells of its first
    line (OTHER_PAGES)."""
    first = csv_bytes.lstrip(b"\xef\xbb\xbf \t\r\n").split(b"\n", 1)[0].decode("utf-8", "replace")
    if not first.startswith('"'):
        return None
    cells = {c.strip().strip('"') for c in first.split(",")}
    return next((page for cell, page in OTHER_PAGES.items() if cell in cells), None)
