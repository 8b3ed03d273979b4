"""Script-mode captures (``tracepipe capture <tool> -- python user_script.py``) and ``--nvtx-include``, on the H200.

sample_traces/h200_user_script: nsys, PyTorch and ncu captures of the same user script (see its README.md).
Expected per-layer kernel counts come from reading the script by hand; ncu's own NVTX stack per kernel
(recorded by ncu, not computed by tracepipe) is the independent check of the nsys and PyTorch attribution.
"""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path

import pytest

from pipeline.analyze import connect
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, gunzip_to, q

SCRIPT = SAMPLES / "h200_user_script"
INCLUDE = SAMPLES / "h200_nvtx_include"

# Per forward (2 forwards): conv1 = cuDNN conv + bias add, relu (shared, called twice) = 1 each call,
# conv2 = conv + bias add, pool = 1 reduce, fc = 1 GEMM; then head, a second root module = 1 GEMM.
# The torch.randn input is one kernel before any module runs.
BY_HAND = {
    None: 1,
    "model/conv1": 2 * 2,
    "model/relu": 2 * 2,
    "model/conv2": 2 * 2,
    "model/pool": 2 * 1,
    "model/fc": 2 * 1,
    "model_1": 2 * 1,
}


@pytest.fixture(scope="module")
def script_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("script")
    for name in ("nsys.sqlite.gz", "torch_trace.json.gz", "ncu_raw.csv.gz"):
        normalize_file(SCRIPT / name, out)
    return out


@pytest.mark.parametrize("trace", ["h200_user_script.nsys", "h200_user_script.torch_trace"])
def test_script_mode_ranges_attribute_every_kernel(script_out: Path, trace: str) -> None:
    rows = connect(script_out).execute(f"SELECT path FROM kernel_layers WHERE trace_id = '{trace}'").fetchall()
    assert collections.Counter(p for (p,) in rows) == BY_HAND


def test_ncu_records_the_same_ranges(script_out: Path) -> None:
    rows = q(script_out, "SELECT nvtx_push_pop FROM ncu_kernels")
    assert collections.Counter(p for (p,) in rows) == BY_HAND


def test_nsys_raw_file_has_every_kernel(tmp_path: Path) -> None:
    raw = sqlite3.connect(gunzip_to(SCRIPT / "nsys.sqlite.gz", tmp_path / "raw.sqlite"))
    assert raw.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone() == (sum(BY_HAND.values()),)


def test_nvtx_include_profiles_only_that_range(tmp_path: Path) -> None:
    # The filtered capture against the unfiltered one of the same model (h200_smallcnn_annotated, all kernels
    # of one forward): exactly the kernels whose ncu NVTX stack is step/model/conv2, with the same names.
    normalize_file(INCLUDE / "ncu_raw.csv.gz", tmp_path / "inc")
    normalize_file(SAMPLES / "h200_smallcnn_annotated" / "ncu_raw.csv.gz", tmp_path / "all")
    sql = "SELECT nvtx_push_pop, name FROM ncu_kernels ORDER BY launch_id"
    got = q(tmp_path / "inc", sql)
    want = [r for r in q(tmp_path / "all", sql) if r[0] == "step/model/conv2"]
    assert len(got) == 2 and got == want
