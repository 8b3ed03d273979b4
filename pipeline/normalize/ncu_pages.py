"""Which Nsight Compute page a CSV is, from its header: light enough for format detection (no polars)."""

from __future__ import annotations

#: ncu pages without a per-launch table: a header cell that names the page -> the page's name.  ``raw`` and
#: ``details`` start with "ID","Process ID"; these do not, and the normalizer says which page it got.
OTHER_PAGES: dict[str, str] = {
    "Address": "source",
    "Source": "source",
    "Attribute": "session",
    "Device Name": "session",
    "Launch Settings": "session",
    "Session": "session",
    "Start Time": "session",
    "Process": "session",
}
EXPORT_HINT = "export a page we read: ncu -i REPORT.ncu-rep --csv --page raw > FILE.csv (or --page details)"


def other_page(csv_bytes: bytes) -> str | None:
    """The ncu page a CSV table without launch rows comes from, by the cells of its first line (OTHER_PAGES)."""
    first = csv_bytes.lstrip(b"\xef\xbb\xbf \t\r\n").split(b"\n", 1)[0].decode("utf-8", "replace")
    if not first.startswith('"'):
        return None
    cells = {c.strip().strip('"') for c in first.split(",")}
    return next((page for cell, page in OTHER_PAGES.items() if cell in cells), None)
