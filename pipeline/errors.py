"""Errors a user can act on: each names the file and what was wrong with it."""

from __future__ import annotations

from pathlib import Path

#: Exit codes of every ``tracepipe`` command (documented in ``--help`` and README).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class BadInputError(Exception):
    """An input file that cannot be read as the format it claims to be."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")
