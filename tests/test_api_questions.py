"""The Python API's question methods (docs/api.md) on the small-CNN sample, each answer checked against the raw
nsys export with sqlite3 and the nested-loop reference of tests/reference.py."""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import tracepipe
from pipeline.normalize import normalize_file
from tests.conftest import SAMPLES, SMALLCNN, gunzip_to
from tests.reference import nsys_path_stats


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small CNN's nsys export and its ncu raw page: `h200_smallcnn.ncu_raw` sorts before `...nsys`."""
    out = tmp_path_factory.mktemp("api")
    normalize_file(SMALLCNN / "nsys.sqlite.gz", out)
    normalize_file(SMALLCNN / "ncu_raw.csv", out)
    return out


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """ResNet-18's nsys export normalized, and as a plain .sqlite: layer1 is a container whose blocks
    (layer1.0, layer1.1) and their convolutions launch every kernel, layer1 itself none."""
    tmp = tmp_path_factory.mktemp("resnet")
    normalize_file(SAMPLES / "h200_resnet18" / "nsys.sqlite.gz", tmp / "normalized")
    return tmp / "normalized", gunzip_to(SAMPLES / "h200_resnet18" / "nsys.sqlite.gz", tmp / "nsys.sqlite")


def innermost_in(raw: Path, text: str) -> Counter[str]:
    """Kernels launched inside the NVTX ranges named ``text``, counted by the innermost range around their launch
    (the latest-starting push/pop range on the launching thread that holds the runtime call's start)."""
    rows = sqlite3.connect(raw).execute(
        """WITH ranges AS (
               SELECT n.globalTid, n.start, n."end", coalesce(n.text, s.value) AS text FROM NVTX_EVENTS n
               LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59),
           launches AS (
               SELECT r.globalTid, r.start AS t FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId))
           SELECT (SELECT g.text FROM ranges g WHERE g.globalTid = l.globalTid AND l.t BETWEEN g.start AND g."end"
                   ORDER BY g.start DESC LIMIT 1)
           FROM launches l WHERE EXISTS (SELECT 1 FROM ranges g
               WHERE g.text = ? AND g.globalTid = l.globalTid AND l.t BETWEEN g.start AND g."end")""",
        [text],
    )
    return Counter(innermost for (innermost,) in rows)


def per_kernel(rows: list[tuple[str, int]]) -> dict[str, list[int]]:
    """launches and summed duration per short name"""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, ns in rows:
        out[name][0] += 1
        out[name][1] += ns
    return dict(out)


def kernels_in(raw: Path, text: str) -> list[tuple[str, int]]:
    """(short name, duration) of the kernels launched inside the NVTX ranges named ``text`` (runtime call start
    within the range, on its thread)."""
    return (
        sqlite3.connect(raw)
        .execute(
            """SELECT s.value, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN StringIds s ON s.id = k.shortName
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
           JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.globalTid = r.globalTid
           LEFT JOIN StringIds t ON t.id = n.textId
           WHERE coalesce(n.text, t.value) = ? AND r.start BETWEEN n.start AND n."end\"""",
            [text],
        )
        .fetchall()
    )


def test_trace_ids_list_timeline_traces_first(folder: Path) -> None:
    with tracepipe.open(folder) as tp:
        assert tp.trace_ids() == ["h200_smallcnn.nsys", "h200_smallcnn.ncu_raw"]  # not name order
        assert tp.trace_ids("timeline") == ["h200_smallcnn.nsys"]
        assert tp.trace_ids("ncu") == ["h200_smallcnn.ncu_raw"] and tp.trace_ids("shapes") == []
        with pytest.raises(ValueError, match="timeline"):
            tp.trace_ids("bogus")


def test_trace_ids_list_timeline_traces_with_kernels_before_cpu_only_ones(tmp_path: Path) -> None:
    # The README's trace_ids()[0] over sample_traces/ was cpu_compiled_train's CPU-only profile (first by name): every
    # example after it came back empty.
    normalize_file(SAMPLES / "cpu_compiled_train" / "torch_trace.json.gz", tmp_path, "cpu.torch_trace")
    normalize_file(SAMPLES / "h200_smallcnn" / "torch_trace.json.gz", tmp_path, "gpu.torch_trace")
    with tracepipe.open(tmp_path) as tp:
        assert tp.trace_ids() == ["gpu.torch_trace", "cpu.torch_trace"]
        assert tp.table("kernel_occupancy", trace_id=tp.trace_ids()[0]).height > 0


def test_layers_are_the_reference_per_path_times(folder: Path, nsys_sqlite: Path) -> None:
    ref = nsys_path_stats(nsys_sqlite)
    with tracepipe.open(folder) as tp:
        got = tp.layers(tp.trace_ids()[0])
    assert {r["path"]: (r["kernels"], r["gpu_time_ns"]) for r in got.iter_rows(named=True)} == ref
    assert got["gpu_time_ns"].is_sorted(descending=True)
    assert (got["forward_gpu_time_ns"] == got["gpu_time_ns"]).filter(got["path"].is_not_null()).all()  # inference
    # outside every range: no pass, the reference's time of the path-less row
    assert got.filter(got["path"].is_null())["no_pass_gpu_time_ns"].to_list() == [ref[None][1]]


def test_kernels_of_a_layer_by_name_or_path(folder: Path, nsys_sqlite: Path) -> None:
    raw = defaultdict(lambda: [0, 0])
    for name, ns in kernels_in(nsys_sqlite, "conv2"):
        raw[name][0] += 1
        raw[name][1] += ns
    with tracepipe.open(folder) as tp:
        by_name = tp.kernels("conv2")  # every path ending in conv2: conv2 and step/conv2
        by_path = tp.kernels("step/conv2")
    per_kernel = defaultdict(lambda: [0, 0])
    for r in by_name.iter_rows(named=True):
        per_kernel[r["short_name"]][0] += r["launches"]
        per_kernel[r["short_name"]][1] += r["gpu_time_ns"]
    assert dict(per_kernel) == dict(raw)
    assert set(by_name["path"]) == {"conv2", "step/conv2"} and set(by_path["path"]) == {"step/conv2"}
    assert by_name["gpu_time_ns"].is_sorted(descending=True)


def test_kernels_of_a_layer_are_its_subtree_per_path(resnet: tuple[Path, Path]) -> None:
    # A user asking for layer1's kernels means the ones launched while layer1 runs (nsys's NVTX projection): those
    # of its blocks and their convolutions, on the rows of the paths that launched them.
    folder, raw = resnet
    inside = per_kernel(kernels_in(raw, "layer1"))
    by_innermost = innermost_in(raw, "layer1")
    assert sum(by_innermost.values()) == 66 and by_innermost["layer1"] == 0  # layer1 itself launches nothing
    with tracepipe.open(folder) as tp:
        by_name, by_path = tp.kernels("layer1"), tp.kernels("step/model/layer1")
        innermost_only = tp.kernels("layer1", subtree=False)
        block = tp.kernels("layer1.0")
        wildcards = [tp.kernels(w) for w in ("step/model/layer_", "step/model/layer%", "layer_", "%")]
    for got in (by_name, by_path):
        launches: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        per_layer: Counter[str] = Counter()
        for r in got.iter_rows(named=True):
            launches[r["short_name"]][0] += r["launches"]
            launches[r["short_name"]][1] += r["gpu_time_ns"]
            per_layer[r["layer"]] += r["launches"]
        assert dict(launches) == inside
        assert per_layer == by_innermost  # one row per path that launched: nothing summed into layer1
        assert all(p.startswith("step/model/layer1/") for p in got["path"])
        assert got["gpu_time_ns"].is_sorted(descending=True)
    assert by_name.equals(by_path)
    assert innermost_only.height == 0  # the old answer: paths ending in layer1 only
    assert sum(block["launches"]) == sum(innermost_in(raw, "layer1.0").values()) == 33
    assert all(w.height == 0 for w in wildcards)  # '_' and '%' are characters of a name, not LIKE's wildcards


def test_steps_hold_the_step_ranges_kernels(folder: Path, nsys_sqlite: Path) -> None:
    in_step = kernels_in(nsys_sqlite, "step")
    with tracepipe.open(folder) as tp:
        steps = tp.steps("h200_smallcnn.nsys")
    assert steps["step"].to_list() == [1] and steps["kernels"].item() == len(in_step)
    row = steps.row(0, named=True)
    assert row["busy_ns"] + row["idle_ns"] == row["wall_ns"] and row["kernel_ns"] >= sum(ns for _, ns in in_step)


def test_findings_name_the_fp32_convolution_of_conv2(folder: Path, nsys_sqlite: Path) -> None:
    ffma = [ns for name, ns in kernels_in(nsys_sqlite, "conv2") if "ffma" in name]
    step_ffma = [ns for name, ns in kernels_in(nsys_sqlite, "step") if "ffma" in name]  # step/conv2's
    with tracepipe.open(folder) as tp:
        got = tp.findings("h200_smallcnn.nsys", rule="fp32_no_tensor_cores")
        assert tp.findings(rule="nope").height == 0
    rows = {r["path"]: r for r in got.iter_rows(named=True)}
    top_level = sum(ffma) - sum(step_ffma)  # conv2 ranges outside the step (the warm-up forward)
    # half of it at stake (tensor_core_speedup 2), rounded as SQL does: halves away from zero
    assert rows["conv2"]["at_stake_ns"] == (top_level + 1) // 2
    assert rows["step/conv2"]["at_stake_ns"] == (sum(step_ffma) + 1) // 2
    assert got["at_stake_ns"].is_sorted(descending=True)
