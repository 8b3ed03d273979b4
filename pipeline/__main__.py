"""``python -m pipeline``: the command line, as the ``tracepipe`` script runs it."""

from pipeline.cli import run

run()
