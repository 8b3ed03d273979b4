"""Exports of a normalized trace to other tools' formats (``tracepipe export ...``)."""
