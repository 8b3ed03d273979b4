"""`make mutants`: break each rule once on purpose and check that a test notices.

Each mutant is (file, original snippet, mutated snippet, the rule it breaks, the tests that guard the rule).
The tree is copied once into a temp dir (git's tracked and untracked-not-ignored files); for each mutant the
snippet is replaced there, the guarding tests run (pytest -x), and the file is restored.  A mutant whose tests
all pass *survived*: the rule is unguarded, and the run fails.  An original snippet that is not found exactly
once is *stale* (the code moved on): the run fails too, so the list keeps pace with the code.  Before any
mutant, the guarding tests run once on the unmutated copy and must pass, or a kill would mean nothing.

    python scripts/mutants.py                # all
    python scripts/mutants.py --only waves   # mutants whose name contains 'waves' (repeat --only for more)
    python scripts/mutants.py --list

The last result is recorded in benchmarks/results/mutants.txt (``--record``); docs/testing.md explains the set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "mutants.txt"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    mutated: str
    rule: str
    tests: tuple[str, ...]


ATTR = "tests/test_attribution_rules.py"
SM = "tests/test_sm_load.py"
REGS = "tests/test_regsplit.py"
OCC = "tests/test_occupancy_rules.py"
STACKS = "tests/test_call_stacks.py"
CALL_STACKS = "pipeline/normalize/sql/call_stacks.sql"
NESTING = "pipeline/normalize/nesting.py"
FAST_EXIT = "tests/test_reliability.py::test_a_batch_command_ends_without_teardown_but_with_its_exit_work_done"
RULES = "tests/test_findings_rules.py"
FAST_EXIT_RULES = "tests/test_reliability.py::test_the_fast_exit_runs_atexit_flushes_and_keeps_the_status"
GOLDEN = "tests/test_views_golden.py"
MACROS = "tests/test_macros_golden.py"
STAGES = "tests/test_stages_golden.py"

MUTANTS: list[Mutant] = [
    # --- the five rules of issue #22 that the suite did not guard -------------------------------------------
    Mutant(
        "equal_start_outer_wins",
        "sql/_range_segments.sql",
        "arg_max(range_id, depth) AS range_id, arg_max(end_ns, depth) AS end_ns",
        "arg_min(range_id, depth) AS range_id, arg_min(end_ns, depth) AS end_ns",
        "among ranges starting at the same instant, the inner (deeper) one is the innermost",
        (ATTR,),
    ),
    Mutant(
        "latest_call_is_launch",
        "sql/gpu_op_launches.sql",
        "arg_min(call_id, start_ns) AS call_id, min(start_ns) AS start_ns, arg_min(tid, start_ns) AS tid",
        "arg_max(call_id, start_ns) AS call_id, max(start_ns) AS start_ns, arg_max(tid, start_ns) AS tid",
        "of several API calls sharing a correlation id, the earliest is the launch",
        (ATTR,),
    ),
    Mutant(
        "outermost_start_end_wins",
        "sql/_point_ranges.sql",
        "arg_max(r.range_id, r.start_ns)",
        "arg_min(r.range_id, r.start_ns)",
        "of overlapping start/end ranges enclosing a launch, the latest-started (innermost) wins",
        (ATTR,),
    ),
    Mutant(
        "waves_off_by_one",
        "sql/kernel_waves.sql",
        "((hb + slots - 1) // nullif(slots, 0))::BIGINT AS waves",
        "(hb // nullif(slots, 0) + 1)::BIGINT AS waves",
        "waves = ceil(blocks / slots): an exact multiple of the resident slots is that many waves, not one more",
        (OCC, REGS),
    ),
    Mutant(
        "register_file_not_split",
        "sql/kernel_occupancy.sql",
        "ELSE ((max_registers_per_sm // sub_partitions_per_sm) // regs_per_warp_allocated)\n"
        "                     * sub_partitions_per_sm // warps_per_block END AS limit_registers",
        "ELSE (max_registers_per_sm // regs_per_warp_allocated) // warps_per_block END AS limit_registers",
        "the register file is split over the SM's sub-partitions: warps per sub-partition are whole",
        (REGS,),
    ),
    # --- more rules ----------------------------------------------------------------------------------------
    Mutant(
        "launch_on_range_end_is_outside",
        "sql/_range_segments.sql",
        "CASE WHEN w.end_ns >= w.p THEN w.end_ns::HUGEINT + 1 ELSE w.p END,\n",
        "CASE WHEN w.end_ns >= w.p THEN w.end_ns::HUGEINT ELSE w.p END,\n",
        "a launch exactly at a range's end is inside it (closed interval, as nsys)",
        (ATTR,),
    ),
    Mutant(
        "partial_warp_rounds_down",
        "sql/kernel_geometry.sql",
        "(threads_per_block + ws - 1) // ws AS warps_per_block",
        "threads_per_block // ws AS warps_per_block",
        "a partial warp occupies a whole warp slot: warps per block round up",
        (OCC, SM),
    ),
    Mutant(
        "arch_table_beats_trace",
        "sql/device_limits.sql",
        "coalesce(t_sm_count, ref_sm_count) AS sm_count",
        "coalesce(ref_sm_count, t_sm_count) AS sm_count",
        "a value the trace recorded wins over the architecture table",
        (SM,),
    ),
    Mutant(
        "no_shared_mem_reserve",
        "sql/kernel_occupancy.sql",
        "+ d.reserved_shared_mem_per_block_bytes + d.shared_mem_alloc_unit_bytes - 1)",
        "+ 0 + d.shared_mem_alloc_unit_bytes - 1)",
        "each block's shared memory includes the driver's per-block reserve",
        (SM,),
    ),
    Mutant(
        "shared_mem_limit_without_optin",
        "sql/kernel_occupancy.sql",
        "                            THEN max_shared_mem_per_block_optin_bytes\n",
        "                            THEN max_shared_mem_per_block_bytes\n",
        "a block may use shared memory past the 48 KiB default up to the opt-in limit (Kineto's occupancy does not)",
        ("tests/test_limits.py::test_kinetos_zero_occupancy_of_opt_in_shared_memory_kernels_is_not_ours",),
    ),
    Mutant(
        "share_of_all_traces",
        "sql/layer_summary.sql",
        "OVER (PARTITION BY p.trace_id), 0) AS share_pct",
        "OVER (), 0) AS share_pct",
        "a layer's share is of its own trace's kernel time",
        ("tests/test_attribution.py", "tests/test_ranks.py"),
    ),
    Mutant(
        "conv_macs_ignore_groups",
        "pipeline/capture/macs.py",
        "return batch * c_out * math.prod(out_spatial) * (c_in // groups) * math.prod(kernel)",
        "return batch * c_out * math.prod(out_spatial) * c_in * math.prod(kernel)",
        "a grouped convolution's MACs divide C_in by groups",
        ("tests/test_capture_samples.py", "tests/test_capture.py"),
    ),
    Mutant(
        "linear_macs_drop_batch",
        "pipeline/capture/macs.py",
        "return math.prod(input_shape[:-1]) * in_features * out_features",
        "return input_shape[0] * in_features * out_features",
        "a linear layer's MACs count every leading dimension (batch and sequence)",
        ("tests/test_capture_samples.py", "tests/test_capture.py"),
    ),
    # --- Python call stacks of chrome ops (sql/call_stacks.sql, the innermost-open rule over Kineto's links) ---
    Mutant(
        "call_stack_equal_start_outer_wins",
        CALL_STACKS,
        "arg_min(f.frame, (f.end_ns, -f.frame)) AS frame",
        "arg_max(f.frame, (f.end_ns, -f.frame)) AS frame",
        "of frames starting at the same instant the deepest (ends first, then later in the file) holds the op",
        (STACKS,),
    ),
    Mutant(
        "call_stack_frame_open_at_its_end",
        CALL_STACKS,
        "FROM latest WHERE end_ns > t\n    UNION ALL\n    SELECT l.op, l.frame, min(c.level)\n"
        "    FROM latest l JOIN chains c ON c.leaf = l.frame AND c.end_ns > l.t\n    WHERE l.end_ns <= l.t",
        "FROM latest WHERE end_ns >= t\n    UNION ALL\n    SELECT l.op, l.frame, min(c.level)\n"
        "    FROM latest l JOIN chains c ON c.leaf = l.frame AND c.end_ns >= l.t\n    WHERE l.end_ns < l.t",
        "a frame that ends at the op's start has returned (half-open): the op is its caller's",
        (STACKS,),
    ),
    Mutant(
        "call_stack_outermost_open_caller",
        CALL_STACKS,
        "SELECT l.op, l.frame, min(c.level)",
        "SELECT l.op, l.frame, max(c.level)",
        "after the latest frame returned, its first caller still open holds the op, not an outer one",
        (STACKS,),
    ),
    Mutant(
        "call_stack_last_of_repeated_id",
        CALL_STACKS,
        "SELECT c.leaf, min(u.parent), arg_min(u.parent_end_ns, u.parent), c.level + 1",
        "SELECT c.leaf, max(u.parent), arg_max(u.parent_end_ns, u.parent), c.level + 1",
        "a Python id written twice in a process names its first frame",
        (STACKS,),
    ),
    # --- the same rule as normalize computes it (numpy, pipeline/normalize/nesting.py) ---------------------------
    Mutant(
        "call_stack_np_equal_start_deepest",
        NESTING,
        "order[tied] = rows[np.lexsort((rows, -end[rows], keys[rows]))]",
        "order[tied] = rows[np.lexsort((rows, end[rows], keys[rows]))]",
        "of frames starting at the same instant the deepest (ends first) holds the op",
        (STACKS,),
    ),
    Mutant(
        "call_stack_np_frame_open_at_its_end",
        NESTING,
        "holder, level = np.where((latest >= 0) & (end[latest] > t), latest, -1)",
        "holder, level = np.where((latest >= 0) & (end[latest] >= t), latest, -1)",
        "a frame that ends at the op's start has returned (half-open): the op is its caller's",
        (STACKS,),
    ),
    Mutant(
        "call_stack_np_first_open_caller",
        NESTING,
        "        todo, at = todo[~open_], at[~open_]\n",
        "",
        "after the latest frame returned, its first caller still open holds the op, not an outer one",
        (STACKS,),
    ),
    Mutant(
        "call_stack_np_missing_parent_id",
        NESTING,
        "ok = (parents >= 0) & (distinct[at] == wanted) & (ids[row] == parents)",
        "ok = (parents >= 0) & (distinct[at] == wanted)",
        "a parent id no frame has links to nothing (not to the nearest id below it)",
        (STACKS,),
    ),
    Mutant(
        "call_stack_np_ranks_probe",
        NESTING,
        'probe_pos = None if probe is None else np.searchsorted(distinct, probe, "right")',
        'probe_pos = None if probe is None else np.searchsorted(distinct, probe, "left")',
        "times too far apart to pack are ranked: an op at a frame's start instant still finds that frame",
        (STACKS,),
    ),
    Mutant(
        "call_stack_np_chain_bound",
        NESTING,
        "keep = (up >= 0) & (budget[live] > len(steps) - 1)",
        "keep = (up >= 0) & (budget[live] >= len(steps) - 1)",
        "a chain of caller links ends after as many links as the SQL's (a cycle cannot loop on)",
        (STACKS,),
    ),
    Mutant(
        "kernel_summary_float_mean",
        "sql/layer_kernel_summary.sql",
        "sum(w.waves_per_sm::DECIMAL(38, 18))::DOUBLE / nullif(count(w.waves_per_sm), 0) AS waves_per_sm",
        "avg(w.waves_per_sm) AS waves_per_sm",
        "means of DOUBLE columns are exact sums: the same bits in any launch order and thread split",
        ("tests/test_exact_means.py",),
    ),
    Mutant(
        "ncu_binary_prefixes",
        "pipeline/normalize/ncu.py",
        '_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}',
        '_PREFIX = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}',
        "ncu's auto-scaled units use decimal SI prefixes (32.768 Kbyte = 32,768 byte)",
        ("tests/test_ncu.py",),
    ),
    Mutant(
        "nesting_zero_length_at_my_start",
        "pipeline/normalize/sql/nvtx_nesting.sql",
        "+ coalesce(e.zero_ended, 0) - o.zero_before AS INTEGER) AS depth",
        "+ CAST(o.end_ns <= o.start_ns AS INTEGER) AS INTEGER) AS depth",
        "a zero-length range at my start that sorts after me has not ended before me (depth was -1)",
        ("tests/test_nesting_rule.py",),
    ),
    # --- session 33: rules of the views rewritten for 10M kernels in bounded memory --------------------------
    Mutant(
        "summary_limiter_tie_last",
        "sql/layer_kernel_summary.sql",
        "first(limiter ORDER BY n DESC, limiter)",
        "first(limiter ORDER BY n DESC, limiter DESC)",
        "the summary's limiter is the most common known one, ties alphabetically first",
        (OCC,),
    ),
    Mutant(
        "summary_limiter_counts_unknown",
        "sql/layer_kernel_summary.sql",
        " FILTER (limiter IS NOT NULL) AS limiter",
        " AS limiter",
        "an unknown limiter is no limiter, however many launches have it",
        (OCC,),
    ),
    Mutant(
        "mac_kernels_without_dispatch",
        "sql/layer_work_map.sql",
        "    JOIN kernel_waves w ON w.trace_id = t.trace_id AND w.kernel_id = t.kernel_id\n    WHERE t.source",
        "    WHERE t.source",
        "MAC kernels in a call are counted among the kernels of the map (those with a dispatch)",
        ("tests/test_work_map.py",),
    ),
    Mutant(
        "step_call_after_step_end",
        "sql/macros/interval_at.sql",
        " AND p.t >= i.lo AND (p.t < i.hi OR closed AND p.t = i.hi)",
        " AND p.t >= i.lo",
        "a point lies in the interval that holds it, not in every one its bucket meets (an operation's step "
        "encloses its call)",
        ("tests/test_step_gpu_idle.py", MACROS),
    ),
    Mutant(
        "segment_holds_its_next_boundary",
        "sql/macros/interval_at.sql",
        " AND (p.t < i.hi OR closed AND p.t = i.hi)",
        " AND (p.t <= i.hi OR closed AND p.t = i.hi)",
        "a segment [p, next p) ends before the next one starts: an instant lies in one segment",
        ("tests/test_attribution.py", MACROS),
    ),
    Mutant(
        "last_segment_before_the_first",
        "sql/_point_ranges.sql",
        "AND z.tid = i.tid AND i.t >= z.p",
        "AND z.tid = i.tid",
        "an instant before a thread's first range start is in no segment (outside), not in its last",
        ("tests/test_attribution.py",),
    ),
    Mutant(
        "bucket_width_bigint",
        "sql/macros/interval_at.sql",
        "greatest(1, (max(hi)::HUGEINT - min(lo)) // (buckets_per_interval * count(*)))::BIGINT AS width",
        "greatest(1, (max(hi) - min(lo)) // (buckets_per_interval * count(*)))::BIGINT AS width",
        "a lane's intervals may span more than BIGINT (a thread's segments, a process's steps: from far before zero "
        "to BIGINT's last instant)",
        ("tests/test_attribution.py", "tests/test_step_gpu_idle.py", MACROS),
    ),
    Mutant(
        "memcpy_joined_to_kernel_attribution",
        "sql/gpu_op_layers.sql",
        "FROM attribution WHERE op_kind = 'memcpy') a",
        "FROM attribution WHERE op_kind = 'kernel') a",
        "each kind of GPU operation takes the attribution of its own kind (a copy_id is not a kernel_id)",
        ("tests/test_attribution.py",),
    ),
    Mutant(
        "memory_limit_above_duckdb_default",
        "pipeline/analyze/engine.py",
        "MEMORY_PER_GPU_OP * gpu_ops), duckdb_default)",
        "MEMORY_PER_GPU_OP * gpu_ops), 10**12)",
        "the input-sized memory limit never exceeds DuckDB's own default (80% of the machine's memory)",
        ("tests/test_reliability.py",),
    ),
    Mutant(
        "memory_limit_not_sized",
        "pipeline/analyze/engine.py",
        "limit = default_memory_limit(ops, parse_size(duckdb_default) or MEMORY_FLOOR)",
        "limit = parse_size(duckdb_default) or MEMORY_FLOOR",
        "without TRACEPIPE_MEMORY_LIMIT a connection gets the input-sized limit, not DuckDB's 80% of memory",
        ("tests/test_reliability.py",),
    ),
    # --- session 35: a batch command's process ends without the interpreter's teardown ----------------------
    Mutant(
        "batch_exit_with_teardown",
        "pipeline/cli.py",
        "            exit_without_teardown(e.code)",
        "            pass",
        "a batch command (normalize, analyze, run) ends its process without the interpreter's teardown",
        (FAST_EXIT,),
    ),
    Mutant(
        "fast_exit_skips_atexit",
        "pipeline/lean.py",
        "    atexit._run_exitfuncs()",
        "    pass",
        "the fast exit still runs the atexit functions first (the spill folder's removal)",
        (FAST_EXIT_RULES,),
    ),
    Mutant(
        "fast_exit_drops_stdout",
        "pipeline/lean.py",
        "            stream.flush()",
        "            pass",
        "the fast exit flushes stdout and stderr: text a pipe's buffer holds is written",
        (FAST_EXIT_RULES,),
    ),
    Mutant(
        "fast_exit_status_lost",
        "pipeline/lean.py",
        "os._exit(code or 0)",
        "os._exit(0)",
        "the fast exit keeps the command's exit status (2 for bad input)",
        (FAST_EXIT, FAST_EXIT_RULES),
    ),
    Mutant(
        "fast_exit_cuts_a_thread",
        "pipeline/lean.py",
        " or threading.active_count() > 1:",
        ":",
        "no fast exit while another thread runs: Python's exit waits for it",
        ("tests/test_reliability.py::test_no_fast_exit_while_another_thread_runs",),
    ),
    Mutant(
        "console_imports_rich_eagerly",
        "pipeline/console.py",
        "from typing import TYPE_CHECKING, TypeVar\n",
        "from typing import TYPE_CHECKING, TypeVar\n\nimport rich.console  # noqa: F401\n",
        "a quiet run never imports rich: the console is made on first use",
        ("tests/test_oneshot.py::test_a_quiet_run_never_imports_rich",),
    ),
    Mutant(
        "run_ignores_view",
        "pipeline/oneshot.py",
        "        only=only,\n",
        "",
        "run --view writes only the views named, as analyze --view",
        ("tests/test_oneshot.py::test_run_writes_only_the_views_asked_for",),
    ),
    Mutant(
        "run_ignores_jobs",
        "pipeline/oneshot.py",
        "force=force, quiet=quiet, jobs=jobs)",
        "force=force, quiet=quiet)",
        "run -j N normalizes N inputs at once, as normalize -j",
        ("tests/test_oneshot.py::test_run_passes_jobs_to_normalize_and_csv_device_to_analyze",),
    ),
    Mutant(
        "run_ignores_device",
        "pipeline/oneshot.py",
        "        device=device,\n",
        "",
        "run --device projects the views onto that GPU, as analyze --device",
        ("tests/test_oneshot.py::test_run_passes_jobs_to_normalize_and_csv_device_to_analyze",),
    ),
    Mutant(
        "run_ignores_csv",
        "pipeline/oneshot.py",
        "        with_csv=with_csv,\n",
        "",
        "run --csv also writes CSV, as analyze --csv",
        ("tests/test_oneshot.py::test_run_passes_jobs_to_normalize_and_csv_device_to_analyze",),
    ),
    # --- session 37: PyTorch 1.8-1.10 traces ---------------------------------------------------------------
    Mutant(
        "pt19_profiler_step_stays_an_op",
        "pipeline/normalize/chrome_map.py",
        '    r"^ProfilerStep#\\d+$": "torch.profiler\'s step (schedule step N)",\n',
        "",
        "a ProfilerStep#N written as an Operator (PyTorch 1.8-1.10) is a range: a step and a layer path",
        (
            "tests/test_external_traces.py::test_pytorch_1_9_profiler_steps_are_steps",
            "tests/test_external_traces.py::test_chrome_trace_numbers",
        ),
    ),
    Mutant(
        "pt18_compute_properties_sm_count",
        "pipeline/normalize/chrome_map.py",
        '"sm_count": ("numSms", "multiProcessorCount"),',
        '"sm_count": ("numSms",),',
        "PyTorch 1.8's computeProperties name the SM count multiProcessorCount",
        ("tests/test_chrome_versions.py::test_pytorch_1_8_compute_properties_give_the_same_devices",),
    ),
    Mutant(
        "accumulate_grad_not_backward",
        "sql/_backward_links.sql",
        "OR regexp_matches(name, '^[A-Za-z0-9_:]+Backward[0-9]*$') OR sequence_number IS NULL) AS is_backward",
        "OR regexp_matches(name, '^[A-Za-z0-9_:]+Backward[0-9]*$')) AS is_backward",
        "gradient accumulation (AccumulateGrad, no sequence number) is backward work",
        # on the external trace autograd's own thread (rule 4) makes it backward anyway; the stage's golden table
        # holds AccumulateGrad as a backward op of the main thread's kind
        (
            "tests/test_stages_golden.py::test_backward_links_link_each_outermost_backward_op_to_its_forward_op",
            "tests/test_external_traces.py::test_chrome_trace_numbers",
        ),
    ),
    Mutant(
        "legacy_profiler_not_named",
        "pipeline/normalize/chrome.py",
        "writer_of = next((OTHER_WRITERS[c] for c in got.unmodelled if c in OTHER_WRITERS), None)",
        "writer_of = None",
        "a legacy autograd-profiler export is named as such, with the fix, not just 'no profiler activity'",
        ("tests/test_bad_inputs.py",),
    ),
    Mutant(
        "empty_normalize_summary",
        "pipeline/normalize_cli.py",
        "if not quiet and not as_json and (results or skipped):",
        "if not quiet and not as_json:",
        "when no input normalized, stdout has no empty summary table (the error lines say it all)",
        ("tests/test_bad_inputs.py::test_cli_prints_no_summary_when_nothing_was_normalized",),
    ),
    Mutant(
        "ncu_2020_sm_throughput_name",
        "pipeline/analyze/ncu_names.py",
        '("sm__throughput.avg.pct_of_peak_sustained_elapsed", "GPU Speed Of Light", "SM [%]", "2019.5-2020.x"),',
        "",
        "ncu 2019.5-2020.x details pages name SM throughput 'SM [%]' in 'GPU Speed Of Light'",
        ("tests/test_ncu_versions.py::test_2020_details_layout",),
    ),
    Mutant(
        "json_lines_not_named",
        "pipeline/normalize/chrome_decode.py",
        'if "trailing characters" in str(e) and _is_json_lines(data):',
        "if False:",
        "a JSON Lines file (nsys's JSON export) is named as such, with the SQLite export as the fix",
        ("tests/test_bad_inputs.py",),
    ),
    Mutant(
        "utf16_not_decoded",
        "pipeline/normalize/source.py",
        "    if data[:2] in UTF16_BOMS:\n",
        "    if False:\n",
        "UTF-16 text with a byte-order mark (a PowerShell redirect) reads as its UTF-8 original",
        (
            "tests/test_ncu_versions.py::test_utf16_export_reads_as_utf8",
            "tests/test_chrome_versions.py::test_utf16_trace_gives_the_same_tables",
        ),
    ),
    Mutant(
        "iteration_start_exact_name",
        "pipeline/normalize/chrome_map.py",
        '    "Iteration Start: ": ',
        '    "Iteration Start: PyTorch Profiler": ',
        "Kineto's iteration marker is known whatever the trace's name",
        ("tests/test_chrome_versions.py::test_iteration_start_markers_of_any_trace_name_are_not_reported",),
    ),
    # --- issue #45: rules of views no test read, each guarded by a golden table (tests/test_views_golden.py) ----
    Mutant(
        "recompute_is_link_target",
        "sql/_backward_links.sql",
        "    WHERE b.op_id IS NULL OR b.end_ns < f.start_ns\n",
        "",
        "a forward op recomputed inside a backward op (activation checkpointing) is no backward op's link target",
        (f"{GOLDEN}::test_recomputed_forward_ops_are_no_backward_link_targets",),
    ),
    Mutant(
        "backward_before_optimizer",
        "sql/launch_point_layers.sql",
        "               WHEN oc.t IS NOT NULL THEN 'optimizer'\n"
        "               WHEN bd.bwd_op_id IS NOT NULL THEN 'backward'\n",
        "               WHEN bd.bwd_op_id IS NOT NULL THEN 'backward'\n"
        "               WHEN oc.t IS NOT NULL THEN 'optimizer'\n",
        "a launch inside both an optimizer step and a backward op (optimizer in a gradient hook) is optimizer",
        (f"{GOLDEN}::test_optimizer_step_inside_a_backward_op_is_optimizer",),
    ),
    Mutant(
        "highest_optimizer_range_wins",
        "sql/launch_point_layers.sql",
        "coalesce(max(range_id) FILTER (WHERE ours), max(range_id)) AS opt_range_id",
        "max(range_id) AS opt_range_id",
        "tracepipe's optimizer range wins over a PyTorch step range inside it (the higher range id)",
        (f"{GOLDEN}::test_tracepipes_optimizer_range_wins_over_pytorchs_step_range_inside_it",),
    ),
    Mutant(
        "optimizer_step_ops_ignored",
        "sql/launch_point_layers.sql",
        "\n          UNION ALL SELECT * FROM interval_at(opt_points, op_steps, 1, true))",
        ")",
        "a launch inside a PyTorch step op (no range: nsys --pytorch=functions-trace) is optimizer work",
        ("tests/test_nsys_pytorch.py::test_functions_trace_alone_still_has_its_optimizer_steps",),
    ),
    Mutant(
        "range_at_bwd_start_is_outside",
        "sql/launch_point_layers.sql",
        "NOT coalesce(own_r.start_ns >= c.bwd_start_ns, false)",
        "NOT coalesce(own_r.start_ns > c.bwd_start_ns, false)",
        "a range opened at the backward op's own start instant is opened inside it and wins over the link",
        (f"{GOLDEN}::test_a_range_opened_at_the_backward_ops_start_wins_over_the_link",),
    ),
    Mutant(
        "tile_channels_floor",
        "sql/kernel_tiles.sql",
        "* ((out_channels + tile_n - 1) // tile_n)",
        "* (out_channels // tile_n)",
        "a partial tile of output channels is a whole tile: channel tiles round up",
        (f"{GOLDEN}::test_kernel_tiles_round_partial_tiles_up",),
    ),
    Mutant(
        "work_map_max_blocks_off_by_one",
        "sql/layer_work_map.sql",
        "c.full_blocks_per_sm + (c.extra_block_sms > 0)::BIGINT AS max_blocks_per_sm",
        "c.full_blocks_per_sm + 1 AS max_blocks_per_sm",
        "blocks that are an exact multiple of the SMs put that many on every SM, not one more on some",
        (f"{GOLDEN}::test_layer_work_map_splits_each_calls_work_over_blocks_and_sms",),
    ),
    Mutant(
        "work_map_calls_joined_on_trace",
        "sql/layer_work_map.sql",
        "LEFT JOIN calls n ON n.trace_id = k.trace_id AND n.range_id IS NOT DISTINCT FROM k.range_id",
        "LEFT JOIN calls n ON n.trace_id = k.trace_id",
        "the MAC kernels of a call are counted per module call (range), not per trace",
        (f"{GOLDEN}::test_layer_work_map_splits_each_calls_work_over_blocks_and_sms",),
    ),
    Mutant(
        "sm_spread_round_groups_swapped",
        "sql/kernel_sm_spread.sql",
        "((blocks % sm_count) * ((model_min_blocks + 1 + r - 1) // r)\n"
        "            + (sm_count - blocks % sm_count) * ((model_min_blocks + r - 1) // r))",
        "((blocks % sm_count) * ((model_min_blocks + r - 1) // r)\n"
        "            + (sm_count - blocks % sm_count) * ((model_min_blocks + 1 + r - 1) // r))",
        "the blocks % SMs SMs with one block more run its rounds; the others run the rounds of the fewer blocks",
        (f"{GOLDEN}::test_kernel_sm_spread_model_rounds_beside_measured_cycles",),
    ),
    Mutant(
        "memory_share_of_memory_ops_only",
        "sql/layer_memory_ops.sql",
        "AS path_ns FROM gpu_op_layers)\nWHERE op_kind IN ('memcpy', 'memset')",
        "AS path_ns FROM gpu_op_layers\n      WHERE op_kind IN ('memcpy', 'memset'))",
        "a memory operation's share is of its path's whole GPU time, kernels included",
        (f"{GOLDEN}::test_layer_memory_ops_share_of_the_paths_gpu_time",),
    ),
    Mutant(
        "gzip_bomb_read_whole",
        "pipeline/normalize/source.py",
        "data = f.read(limit + 1)",
        "data = f.read()",
        "a gzip input past the limit is refused as its stream passes it, never decompressed whole first",
        ("tests/test_reliability.py::test_a_gzip_bomb_is_refused_without_being_held_whole",),
    ),
    Mutant(
        "zero_input_limit_accepted",
        "pipeline/normalize/source.py",
        "if n is None or n <= 0:",
        "if n is None or n < 0:",
        "TRACEPIPE_MAX_INPUT_BYTES=0 is a bad setting (exit 2 once), not a limit every in-memory input fails",
        ("tests/test_reliability.py::test_a_zero_input_limit_is_a_bad_setting",),
    ),
    # --- issues #41 and #43: layers from the traces people have, and torch.compile'd models ---------------------
    Mutant(
        "module_frames_not_layers",
        "pipeline/normalize/chrome.py",
        'frames = None if getattr(trace, CAPTURE_MARK) else _module_frames(tables["python_function"])',
        "frames = None",
        "a PyTorch trace recorded with stacks gets its layers from the nn.Module frames",
        ("tests/test_module_frames.py",),
    ),
    Mutant(
        "capture_mark_ignored",
        "pipeline/normalize/chrome.py",
        'frames = None if getattr(trace, CAPTURE_MARK) else _module_frames(tables["python_function"])',
        'frames = _module_frames(tables["python_function"])',
        "a trace marked by tracepipe capture keeps its qualified names: its module frames are no layers",
        ("tests/test_module_frames.py",),
    ),
    Mutant(
        "compiled_graph_marker_is_a_layer",
        "pipeline/normalize/chrome_map.py",
        'r"^## Call CompiledFxGraph \\S+ ##$"',
        'r"^## Never Matches ##$"',
        "Inductor's `## Call CompiledFxGraph <key> ##` marker is an op, never a layer",
        ("tests/test_module_frames.py",),
    ),
    Mutant(
        "nsys_module_forward_not_layer",
        "pipeline/normalize/nsys_map.py",
        'PYTORCH_MODULE_FORWARD = r"^torch\\.nn\\.modules\\.(\\w+)\\.forward$"',
        'PYTORCH_MODULE_FORWARD = r"^torch\\.nn\\.modules\\.(\\w+)\\.never$"',
        "nsys --pytorch=functions-trace's torch.nn.modules.<Class>.forward ranges are layers named by class",
        ("tests/test_nsys_pytorch.py",),
    ),
    Mutant(
        "torch_optim_step_not_optimizer",
        "sql/_optimizer_steps.sql",
        "WHERE name LIKE 'Optimizer.step#%' OR regexp_matches(name, '^torch\\.optim\\.\\w+\\.step$')",
        "WHERE name LIKE 'Optimizer.step#%'",
        "nsys's torch.optim.<Class>.step range (an op) makes the optimizer pass",
        ("tests/test_nsys_pytorch.py",),
    ),
    Mutant(
        "autograd_thread_not_backward",
        "sql/launch_point_layers.sql",
        "               WHEN bt.tid IS NOT NULL THEN 'backward'\n",
        "",
        "work launched on autograd's engine thread (pt_autograd_N) is backward even with no link",
        ("tests/test_nsys_pytorch.py",),
    ),
    Mutant(
        "engine_thread_any_backward_op",
        "sql/_backward_threads.sql",
        "GROUP BY ALL HAVING bool_and(fwd_thread_id > 0)",
        "GROUP BY ALL HAVING bool_or(fwd_thread_id > 0)",
        "a thread is autograd's engine only if it runs nothing but backward nodes (the main thread runs some)",
        ("tests/test_compiled.py::test_compiled_kernels_sit_on_decoder_layers",),
    ),
    Mutant(
        "pytorch_optimizer_range_wins",
        "sql/_optimizer_steps.sql",
        "ours AS (SELECT * FROM candidates WHERE ours),\ntheirs AS (SELECT * FROM candidates WHERE NOT ours)",
        "ours AS (SELECT * FROM candidates),\ntheirs AS (SELECT * FROM candidates WHERE false)",
        "tracepipe's optimizer range wins over PyTorch's Optimizer.step# range around it (the two nest apart)",
        ("tests/test_user_script_train.py", STAGES),
    ),
    Mutant(
        "pytorch_ranges_are_ops_under_emit_nvtx",
        "pipeline/normalize/op_ranges.py",
        "         WHEN {_TORCH_RANGE} THEN {_BARE}\n",
        "",
        "PyTorch's own ranges (Optimizer.step#, ProfilerStep#) stay ranges under emit_nvtx, as in PyTorch traces",
        ("tests/test_user_script_train.py",),
    ),
    Mutant(
        "compiled_launch_first_node",
        "pipeline/normalize/compiled.py",
        "chain = max(placed, key=lambda p: p[0])[1] if placed else []",
        "chain = min(placed, key=lambda p: p[0])[1] if placed else []",
        "a compiled launch goes to the module of its output: its last node in the graph",
        ("tests/test_compiled.py",),
    ),
    Mutant(
        "compiled_backward_no_seq_module",
        "pipeline/normalize/compiled.py",
        'from_forward = by_seq.get((g.get("compile_id"), node["seq_nr"]), [])',
        "from_forward = []",
        "a backward node takes the modules of the forward nodes of its autograd sequence number",
        ("tests/test_compiled.py",),
    ),
    # --- the rules of the table macros (sql/macros/), each guarded by its own golden table ------------------
    Mutant(
        "interval_listed_in_its_first_bucket_only",
        "sql/macros/interval_at.sql",
        "unnest(generate_series(s.lo // w.width, (s.hi - CASE WHEN closed THEN 0 ELSE 1 END) // w.width))",
        "unnest(generate_series(s.lo // w.width, s.lo // w.width))",
        "an interval is listed in every bucket it meets, so a point far into a long one finds it",
        (MACROS, "tests/test_attribution.py"),
    ),
    Mutant(
        "closed_interval_without_its_end",
        "sql/macros/interval_at.sql",
        "(p.t < i.hi OR closed AND p.t = i.hi)",
        "(p.t < i.hi)",
        "a closed interval holds its end instant (a call at a step range's last instant is the step's)",
        (MACROS,),
    ),
    Mutant(
        "null_lane_is_no_lane",
        "sql/macros/interval_at.sql",
        "i.sublane IS NOT DISTINCT FROM p.sublane\n AND i.bucket",
        "i.sublane = p.sublane\n AND i.bucket",
        "lanes compare as IS NOT DISTINCT FROM: a process's or a device's lane (sublane NULL) is one lane",
        (MACROS, "tests/test_step_gpu_idle.py"),
    ),
    Mutant(
        "outermost_inner_first_at_equal_start",
        "sql/macros/outermost_intervals.sql",
        "ORDER BY start_ns, end_ns DESC, tie",
        "ORDER BY start_ns, end_ns, tie",
        "of intervals starting together the longer comes first, so the inner one is inside it",
        (MACROS,),
    ),
    Mutant(
        "outermost_touching_ignored",
        "sql/macros/outermost_intervals.sql",
        "prev_end < CASE WHEN touching THEN start_ns ELSE end_ns END",
        "prev_end < end_ns",
        "touching: an interval starting at or before an earlier one's end is inside it (a compiled graph's "
        "statement ops in no other)",
        (MACROS,),
    ),
    Mutant(
        "step_folded_any_segment",
        "sql/macros/step_folded.sql",
        "'^(ProfilerStep#|step#|step_)[0-9]+(/|$)'",
        "'(ProfilerStep#|step#|step_)[0-9]+(/|$)'",
        "only a path's first segment is its step: a later `step_3` is a layer's own name",
        (MACROS,),
    ),
    Mutant(
        "gpu_ops_kind_not_asked_for",
        "sql/macros/gpu_ops.sql",
        "WHERE list_contains(kinds, 'kernel')",
        "WHERE true",
        "a kind left out of kinds gives no row (gpu_op_layers joins each kind to its own attribution)",
        (MACROS, "tests/test_attribution.py"),
    ),
    Mutant(
        "gpu_ops_memcpy_unnamed",
        "sql/macros/gpu_ops.sql",
        "       '[CUDA memcpy ' || coalesce(kind, 'unknown') || ']' AS name,\n",
        "       kind AS name,\n",
        "a copy is named as nsys names it, `[CUDA memcpy <kind>]`",
        (MACROS,),
    ),
    # --- the stages of step_gpu_idle ----------------------------------------------------------------------------
    Mutant(
        "graph_node_call_is_where_it_was_made",
        "sql/_gpu_op_calls.sql",
        "a.start_ns AS call_ns",
        "g.launch_start_ns AS call_ns",
        "a replayed graph node's call is the graph launch (its step), not where the node was made",
        (STAGES, "tests/test_step_gpu_idle.py"),
    ),
    Mutant(
        "nested_step_range_is_a_step",
        "sql/_steps.sql",
        "    WHERE depth = top\n",
        "",
        "steps are the outermost step ranges: a `step` range inside a ProfilerStep# is none",
        (STAGES,),
    ),
    Mutant(
        "window_ends_at_the_cpu_end",
        "sql/_step_windows.sql",
        "greatest(any_value(cpu_end_ns), max(end_ns)) AS window_end_ns",
        "any_value(cpu_end_ns) AS window_end_ns",
        "a step's window runs on to the end of the last operation it launched",
        (STAGES, "tests/test_step_gpu_idle.py"),
    ),
    Mutant(
        "window_ops_only_the_steps_own",
        "sql/_window_ops.sql",
        "WHERE p.start_ns < w.window_end_ns AND p.end_ns > w.window_start_ns",
        "WHERE p.start_ns < w.window_end_ns AND p.end_ns > w.window_start_ns AND p.call_ns >= w.window_start_ns",
        "every operation on the device counts in a window it overlaps, whoever launched it",
        (STAGES, "tests/test_step_gpu_idle.py"),
    ),
    Mutant(
        "coverage_warns_at_any_share",
        "sql/layer_coverage.sql",
        "WITH params AS (SELECT 10.0 AS warn_pct)",
        "WITH params AS (SELECT 0.0 AS warn_pct)",
        "a trace is said to lack layers only when 10% or more of its GPU time has none",
        ("tests/test_layer_coverage.py",),
    ),
    # --- issue #42: findings rules and rank jobs (tests/test_findings_rules.py, tests/test_rank_jobs.py) ---------
    Mutant(
        "layout_without_convolution",
        "sql/findings.sql",
        "HAVING bool_or(is_conv) AND bool_or(is_layout)",
        "HAVING bool_or(is_layout)",
        "layout transforms count only in a layer that runs a convolution",
        (RULES + "::test_layout_conversions_without_a_convolution_or_below_the_share_do_not_fire",),
    ),
    Mutant(
        "tail_half_full_fires",
        "sql/findings.sql",
        "w.tail_wave_utilization < th.tail_max_fill",
        "w.tail_wave_utilization <= th.tail_max_fill",
        "a last wave exactly half full is no tail (under half fires)",
        (RULES + "::test_one_wave_or_a_half_full_last_wave_does_not_fire",),
    ),
    Mutant(
        "occupancy_of_library_tiles",
        "sql/findings.sql",
        "AND EXISTS (SELECT 1 FROM names n WHERE n.name = k.name AND NOT n.not_occupancy)",
        "AND EXISTS (SELECT 1 FROM names n WHERE n.name = k.name)",
        "library GEMM/conv/attention kernels (their tile sets occupancy) and collectives are left out",
        (RULES + "::test_short_library_or_quarter_occupancy_kernels_do_not_fire",),
    ),
    Mutant(
        "launch_bound_run_of_seven",
        "sql/findings.sql",
        "HAVING count(*) >= any_value(th.launch_min_ops)",
        "HAVING count(*) >= any_value(th.launch_min_ops) - 1",
        "a stretch has at least launch_bound_min_ops starved operations",
        (RULES + "::test_busy_short_or_graph_replayed_stretches_do_not_fire",),
    ),
    Mutant(
        "launch_bound_counts_the_gap_before",
        "sql/findings.sql",
        "sum(CASE WHEN pos > first_pos THEN gap ELSE 0 END) AS idle",
        "sum(gap) AS idle",
        "only the idle between a stretch's operations is at stake, not the gap before its first",
        (RULES + "::test_kernels_shorter_than_their_launches_fire_with_the_idle_between",),
    ),
    Mutant(
        "launch_bound_graph_replay",
        "sql/findings.sql",
        "WHERE NOT o.tuning AND o.graph_node_id IS NULL AND o.duration_ns < o.issue_ns",
        "WHERE NOT o.tuning AND o.duration_ns < o.issue_ns",
        "kernels replayed from a CUDA graph were issued by one launch: never starved",
        (RULES + "::test_busy_short_or_graph_replayed_stretches_do_not_fire",),
    ),
    Mutant(
        "fp32_without_tensor_cores_on_pascal",
        "sql/findings.sql",
        "WHERE n.fp32_simt AND d.vendor = 'NVIDIA' AND d.compute_major >= th.fp32_min_major",
        "WHERE n.fp32_simt AND d.vendor = 'NVIDIA'",
        "a GPU without tensor cores (cc < 7.0) has no FP32-off-the-tensor-cores finding",
        (RULES + "::test_tensor_core_kernels_or_gpus_without_tensor_cores_do_not_fire",),
    ),
    Mutant(
        "fp32_tf32_fix_on_volta",
        "sql/findings.sql",
        "WHEN g.compute_major < 8 THEN",
        "WHEN g.compute_major < 7 THEN",
        "Volta/Turing tensor cores take fp16, not TF32: their fix is float16 autocast",
        (RULES + "::test_an_fp32_gemm_on_a_tensor_core_gpu_fires_with_the_fix_it_needs",),
    ),
    Mutant(
        "pinned_copy_fires",
        "sql/findings.sql",
        "AND m.src_kind = 'Pageable'",
        "",
        "only pageable host memory makes a copy synchronous; a pinned copy is no finding",
        (RULES + "::test_pinned_copies_and_copies_outside_steps_do_not_fire",),
    ),
    Mutant(
        "backward_at_three_times_fires",
        "sql/findings.sql",
        "l.bwd > th.bwd_max_ratio * l.fwd",
        "l.bwd >= th.bwd_max_ratio * l.fwd",
        "a backward of exactly backward_max_ratio times its forward does not fire (more than it does)",
        (RULES + "::test_a_backward_of_three_times_or_without_forward_does_not_fire",),
    ),
    Mutant(
        "straggler_against_the_mean",
        "sql/findings.sql",
        "median(l.gpu_time_ns) OVER (PARTITION BY j.job, l.path) AS median_ns",
        "avg(l.gpu_time_ns) OVER (PARTITION BY j.job, l.path) AS median_ns",
        "a straggler is measured against the median rank, which the straggler itself does not drag up",
        (RULES + "::test_a_rank_a_fifth_above_the_median_fires",),
    ),
    Mutant(
        "findings_without_share_floor",
        "sql/findings.sql",
        "AND 100.0 * f.at_stake_ns >= th.min_pct * t.trace_ns",
        "",
        "a finding needs min_at_stake_pct of its trace's kernel time, not just min_at_stake_ns",
        (RULES + "::test_findings_keep_what_is_worth_a_look_ranked_by_time_at_stake",),
    ),
    Mutant(
        "rank_twice_in_a_job",
        "sql/rank_jobs.sql",
        "WHERE ranks >= 2 AND distinct_ranks = ranks",
        "WHERE ranks >= 2",
        "a group of traces with one rank twice is ambiguous: no job",
        ("tests/test_rank_jobs.py::test_unrelated_traces_with_rank_numbers_are_no_job",),
    ),
    Mutant(
        "job_is_the_folder",
        "sql/rank_jobs.sql",
        "CASE WHEN contains(named, 'rank#') THEN named ELSE",
        "CASE WHEN false THEN named ELSE",
        "files of one folder are one job only when they are named alike but for the rank (or name none)",
        ("tests/test_rank_jobs.py::test_unrelated_traces_with_rank_numbers_are_no_job",),
    ),
    Mutant(
        "stragglers_across_jobs",
        "sql/layer_stragglers.sql",
        "row_number() OVER (PARTITION BY j.job, t.path ORDER BY",
        "row_number() OVER (PARTITION BY t.path ORDER BY",
        "ranks of different jobs are never compared",
        ("tests/test_rank_jobs.py::test_two_jobs_in_one_folder_are_compared_apart",),
    ),
    Mutant(
        "timeline_labels_overlap",
        "pipeline/report/plots.py",
        "and not any(box.overlaps(b) for b in boxes)",
        "",
        "a timeline label that would overlap one already drawn is left out",
        ("tests/test_report_glance.py::test_timeline_labels_that_do_not_fit_are_left_out",),
    ),
    Mutant(
        "title_not_wrapped",
        "pipeline/report/plots.py",
        "chars = max(20, int(max(len(line) for line in lines) * room / width))",
        "chars = 10_000",
        "a title that runs past the figure's edge is wrapped onto more lines",
        ("tests/test_report_glance.py::test_no_title_runs_past_the_figure",),
    ),
    Mutant(
        "long_table_not_folded",
        "pipeline/report/html.py",
        "    if folded.height:\n",
        "    if False:\n",
        "a long table folds the rows past its top ones into a <details>",
        ("tests/test_report_glance.py::test_long_tables_fold_the_rest_and_short_ones_are_whole",),
    ),
    Mutant(
        "trace_ids_by_name_only",
        "tracepipe/__init__.py",
        "return [tid for *_, tid in sorted(picked)]",
        "return sorted(tid for *_, tid in picked)",
        "trace_ids() lists timeline traces first (the README's trace_ids()[0])",
        ("tests/test_api_questions.py::test_trace_ids_list_timeline_traces_first",),
    ),
    Mutant(
        "trace_ids_cpu_only_first",
        "tracepipe/__init__.py",
        "(order.get(fmt, len(order)), tid not in with_kernels, tid)",
        "(order.get(fmt, len(order)), False, tid)",
        "trace_ids() lists timeline traces with kernels before CPU-only ones",
        ("tests/test_api_questions.py::test_trace_ids_list_timeline_traces_with_kernels_before_cpu_only_ones",),
    ),
    Mutant(
        "piped_tables_at_80_columns",
        "pipeline/console.py",
        "    return PIPED_WIDTH\n",
        "    return None\n",
        "piped output has no width to fit: tables print whole, not cut at rich's 80 columns",
        ("tests/test_findings_cli.py::test_run_ends_with_the_top_findings",),
    ),
    Mutant(
        "every_trace_figures_embedded",
        "pipeline/report/build.py",
        'return set(by_time["trace_id"].head(figures).to_list())',
        "return set(views.trace_ids)",
        "the page embeds the figures of the traces with the most GPU time only; the others' are linked files",
        ("tests/test_report_glance.py::test_the_page_embeds_the_figures_of_the_traces_with_most_gpu_time",),
    ),
    Mutant(
        "arrow_pool_not_sized",
        "pipeline/analyze/engine.py",
        "    size_arrow_pool(rows)  # the Parquet reads and writes around DuckDB: as many threads",
        "    pass",
        "Arrow's CPU pool is sized as DuckDB's threads are, not one thread per host core",
        ("tests/test_analyze_write.py::test_duckdb_threads_follow_the_row_groups_there_are_to_scan",),
    ),
    Mutant(
        "threads_past_memory_limit",
        "pipeline/lean.py",
        "    return min(threads, max(1, memory_limit // MEMORY_PER_THREAD))",
        "    return threads",
        "no more DuckDB threads than the memory limit has 128 MiB for",
        ("tests/test_analyze_write.py::test_duckdb_threads_leave_each_thread_its_share_of_the_memory_limit",),
    ),
    Mutant(
        "spilling_view_whole_limit",
        "pipeline/analyze/write.py",
        "SPILL_SHARE = 0.75",
        "SPILL_SHARE = 1.0",
        "a view whose header says it spills runs under 3/4 of DuckDB's memory limit on big inputs",
        ("tests/test_analyze_write.py::test_a_view_that_spills_runs_under_part_of_the_memory_limit_on_big_inputs",),
    ),
    Mutant(
        "spilling_limit_kept_after",
        "pipeline/analyze/write.py",
        "        limits.set(spills=False)",
        "        pass",
        "after the views are written the connection has its whole memory limit and threads back",
        ("tests/test_analyze_write.py::test_a_view_that_spills_runs_under_part_of_the_memory_limit_on_big_inputs",),
    ),
    Mutant(
        "spilling_view_all_threads",
        "pipeline/analyze/write.py",
        "threads_within(limit, self.threads) if spills else self.threads",
        "self.threads",
        "a spilling view's lower limit still leaves each DuckDB thread 128 MiB",
        ("tests/test_analyze_write.py::test_a_view_that_spills_runs_under_part_of_the_memory_limit_on_big_inputs",),
    ),
    Mutant(
        "connect_threads_without_limit",
        "pipeline/analyze/engine.py",
        'con.execute("SET threads = $n", {"n": duckdb_threads(rows, limit)})',
        'con.execute("SET threads = $n", {"n": duckdb_threads(rows)})',
        "connect caps DuckDB's threads by the memory limit it sets",
        ("tests/test_analyze_write.py::test_duckdb_threads_leave_each_thread_its_share_of_the_memory_limit",),
    ),
    Mutant(
        "sql_big_views_as_tables",
        "pipeline/analyze/engine.py",
        "    if ops <= LAZY_TABLE_OPS:\n        return None",
        "    if True:\n        return None",
        "a lazy connection over a big trace computes its views once into Parquet files, not temp tables",
        ("tests/test_api.py::test_a_big_traces_views_computed_once_go_to_files_the_views_read",),
    ),
    Mutant(
        "sql_big_views_inlined",
        "pipeline/analyze/engine.py",
        "(v for v in order if v not in only) if scratch is not None else",
        "computed_once(only, sql_dir, have) if scratch is not None else",
        "past LAZY_TABLE_OPS every view a statement's views read goes to a file, not only the shared and staged ones",
        ("tests/test_api.py::test_a_big_traces_views_computed_once_go_to_files_the_views_read",),
    ),
    Mutant(
        "diff_views_nested",
        "pipeline/report/diff.py",
        "con = connect(store, read_only=True, lazy=True)",
        'con = connect(store, views=["layer_summary", "layer_macs"], read_only=True)',
        "a diff side on normalized data computes the views two of its views read once (a lazy connection)",
        ("tests/test_diff.py::test_a_normalized_side_computes_the_views_two_of_its_views_read_once",),
    ),
    Mutant(
        "parameters_hide_the_views",
        "pipeline/analyze/readonly.py",
        'for text in (statement, _PARAMETER.sub("NULL", statement)):',
        "for text in (statement,):",
        "a statement DuckDB cannot prepare with parameters in it still names the views it reads to a lazy connection",
        ("tests/test_cli.py", "tests/test_export_perfetto.py"),
    ),
    Mutant(
        "launch_bound_islands_not_stretches",
        "sql/findings.sql",
        "    SELECT *, pos - row_number() OVER (PARTITION BY trace_id, device_id ORDER BY pos) AS run",
        "    SELECT *, pos AS run",
        "a stretch is a run of consecutive starved operations: a starved one's position less its rank among them",
        ("tests/test_findings_rules.py::test_kernels_shorter_than_their_launches_fire_with_the_idle_between",),
    ),
    Mutant(
        "launch_bound_median_with_first_issue",
        "sql/findings.sql",
        "median(issue_ns) FILTER (pos > first_pos) AS median_issue_ns",
        "median(issue_ns) AS median_issue_ns",
        "a stretch's median issue interval leaves out its first operation's (issued after a busy or unstarved one)",
        ("tests/test_findings_rules.py::test_a_stretch_s_medians_leave_out_its_first_operation_s_issue_interval",),
    ),
    Mutant(
        "launch_bound_common_path_not_the_first_s",
        "sql/findings.sql",
        "JOIN stretch_paths f ON f.first AND",
        "JOIN stretch_paths f ON NOT f.first AND",
        "a stretch's path is the part every operation's path shares with its first operation's",
        ("tests/test_findings_rules.py::test_a_stretch_s_medians_leave_out_its_first_operation_s_issue_interval",),
    ),
    Mutant(
        "export_views_nested",
        "pipeline/export/perfetto.py",
        "con = connect(normalized, read_only=True, lazy=True)",
        'con = connect(normalized, read_only=True, views=["gpu_op_layers", "nvtx_paths", "kernel_occupancy", '
        '"kernel_waves"])',
        "the Perfetto export computes the views two of its views read once (a lazy connection)",
        ("tests/test_export_perfetto.py::test_the_views_two_of_the_exports_views_read_are_computed_once",),
    ),
    Mutant(
        "sql_shared_views_inlined",
        "pipeline/analyze/engine.py",
        "create_views(con, sql_dir, only=only, keep_existing=True, once_as_tables=True, scratch=scratch)",
        "create_views(con, sql_dir, only=only, keep_existing=True, once_as_tables=False, scratch=scratch)",
        "the lazy connection computes the views two of a statement's views read once, into temp tables",
        ("tests/test_api.py::test_views_are_created_as_statements_name_them",),
    ),
    Mutant(
        "openblas_pool_at_import",
        "pipeline/cli.py",
        "settle_process_environment()  # before",
        "pass  # settle_process_environment()  # before",
        "the command line holds numpy's OpenBLAS to one thread before numpy is imported",
        ("tests/test_cli.py::test_the_command_line_starts_no_openblas_thread_pool_and_keeps_a_users_setting",),
    ),
    Mutant(
        "capture_passes_our_settings_on",
        "pipeline/capture/cli.py",
        "        env = users_environment()",
        "        env = dict(os.environ)",
        "the user's program under capture gets the environment the user gave, not tracepipe's own settings",
        ("tests/test_cli.py::test_the_users_program_under_capture_gets_the_environment_the_user_gave",),
    ),
    Mutant(
        "mid_size_calls_not_on_a_thread",
        "pipeline/normalize/nsys.py",
        "    return _in_thread(write_api_calls_in, path, shown, writer)",
        "    _write_api_calls(db, writer)\n    return lambda: None",
        "a mid-size export's runtime calls are written on a thread of their own beside the other tables",
        (
            "tests/test_nsys_stored_order.py::test_a_mid_size_export_s_kernels_and_calls_are_written_by_threads_and_equal_the_serial_ones",
        ),
    ),
    Mutant(
        "api_views_all_at_connect",
        "pipeline/analyze/engine.py",
        "        return connect(folder, read_only=True, device=device, lazy=True)",
        "        return connect(folder, read_only=True, device=device)",
        "the API's connection creates the views statements name as they come, not all ~46 at connect",
        ("tests/test_api.py::test_views_are_created_as_statements_name_them",),
    ),
    # --- stop 55: what a sweep of 54 real traces from other projects found ----------------------------------
    Mutant(
        "hip_9_0_without_cu_count",
        "sql/device_limits.sql",
        "AND (h.hip_cu_counts IS NULL OR list_contains(h.hip_cu_counts, n.sm_count))",
        "AND h.hip_cu_counts IS NULL",
        "HIP's 9.0 is gfx908 or gfx90a, told apart by the CU count (120; 104 or 110)",
        ("tests/test_limits.py", "tests/test_external_traces.py"),
    ),
    Mutant(
        "nsys_export_without_kernels_refused",
        "pipeline/normalize/nsys.py",
        "waits = [_kernels_writer(db, plain, shown, writer)] if KERNEL_TABLE in db.tables else []",
        "waits = [_kernels_writer(db, plain, shown, writer)]",
        "an export without a kernel table is a trace: its other tables are normalized",
        ("tests/test_external_traces.py", "tests/test_bad_inputs.py"),
    ),
    # --- stop 56: rules a third sweep of real traces added ----------------------------------------------------
    Mutant(
        "unlinked_backward_all_numbered",
        "sql/layer_coverage.sql",
        "b.op_id IS NOT NULL AS numbered",
        "true AS numbered",
        "unlinked backward work in a numbered backward op lacks its forward ops; unnumbered (AccumulateGrad) does not",
        ("tests/test_layer_coverage.py",),
    ),
    Mutant(
        "ncu_nvtx_six_trailing_fields",
        "pipeline/normalize/ncu.py",
        "return name, len(fields) - name - 1",
        "return name, 6",
        "an ncu NVTX item holds the fields its column's header lists (2020.2: two after the name, later six)",
        ("tests/test_ncu_versions.py",),
    ),
    # --- stop 58: rules a fourth sweep of real traces added ----------------------------------------------------
    Mutant(
        "slash_in_a_text_is_a_level",
        "sql/nvtx_paths.sql",
        "SELECT c.trace_id, c.range_id, chain.path || '/' || path_level(c.text)",
        "SELECT c.trace_id, c.range_id, chain.path || '/' || c.text",
        "a '/' inside a range's text is no level of its path (written '∕')",
        ("tests/test_path_levels.py",),
    ),
    Mutant(
        "slash_in_a_module_chain_is_a_level",
        "sql/gpu_op_layers.sql",
        "array_to_string(list_transform(o.module_chain, lambda x: path_level(x)), '/')",
        "array_to_string(o.module_chain, '/')",
        "a '/' inside a compiled region's module chain names is no level of its path",
        ("tests/test_path_levels.py",),
    ),
    Mutant(
        "other_domain_is_partial",
        "sql/layer_coverage.sql",
        "WHEN j.other_domain_ns * 2 > j.no_layer_ns THEN 'other_domain'",
        "WHEN false THEN 'other_domain'",
        "work launched inside other NVTX domains' ranges only is told so, naming them",
        ("tests/test_layer_coverage.py",),
    ),
    Mutant(
        "no_modules_is_no_layers",
        "sql/layer_coverage.sql",
        "AND x.lack = 'no_modules' AND x.fix IS NOT NULL) THEN 'no_modules'",
        "AND x.lack = 'no_modules' AND x.fix IS NOT NULL) THEN 'no_layers'",
        "a chrome trace with stacks and no module frame gets the fix for that, not 'record with_stack=True'",
        ("tests/test_layer_coverage.py",),
    ),
    Mutant(
        "gpu_activity_alone_is_no_layers",
        "pipeline/layer_hints.py",
        '    ("no_cpu_ops", False, None),\n',
        "",
        "a chrome trace of GPU activity alone is told to record CPU activity too, not with_stack",
        ("tests/test_layer_coverage.py",),
    ),
    Mutant(
        "cutlass_tensorop_conv_is_a_gemm",
        "pipeline/analyze/finding_rules.py",
        "xmma_fprop|[0-9]fprop|",
        "xmma_fprop|",
        "CUTLASS tensor-op convolutions (s1688fprop) are convolutions: TF32 beside them says nothing of matmuls",
        ("tests/test_findings_rules.py", "tests/test_external_traces.py"),
    ),
    Mutant(
        "copies_only_said_unmodelled",
        "pipeline/normalize/chrome.py",
        "    elif copies:  # GPU activity was recorded",
        "    elif False:  # GPU activity was recorded",
        "a chrome trace whose GPU work is copies only says so",
        ("tests/test_external_traces.py",),
    ),
    Mutant(
        "cuda_traced_no_calls_said_untraced",
        "pipeline/normalize/nsys.py",
        "        if asked:\n",
        "        if False:\n",
        "an nsys export that traced CUDA but holds no CUDA call says the process made none",
        ("tests/test_external_traces.py",),
    ),
    Mutant(
        "autotuning_unsaid",
        "sql/analysis_warnings.sql",
        "HAVING sum(g.duration_ns) >= 0.01 * any_value(c.gpu_ns)",
        "HAVING false",
        "GPU work launched inside Inductor's CachingAutotuner ops is said with its share",
        ("tests/test_compiled.py::test_inductors_autotuning_is_said_with_its_share",),
    ),
    Mutant(
        "messages_read_as_markup",
        "pipeline/console.py",
        "else None, markup=False)",
        "else None, markup=True)",
        "errors, warnings and a trace's texts print as text, not rich markup",
        ("tests/test_bad_inputs.py", "tests/test_cli_surface.py"),
    ),
    # --- stop 59: a new user's review, mended ----------------------------------------------------------------------
    Mutant(
        "no_pass_counts_copies",
        "sql/layer_summary.sql",
        "FILTER (k AND pass IS NULL), 0) AS BIGINT) AS no_pass_gpu_time_ns",
        "FILTER (pass IS NULL), 0) AS BIGINT) AS no_pass_gpu_time_ns",
        "the four per-pass columns add up to the path's kernel time (no_pass: kernels of no pass, not copies)",
        ("tests/test_attribution.py::test_pass_columns_add_up_to_the_layers_time",),
    ),
    Mutant(
        "kernels_of_a_layer_alone",
        "tracepipe/__init__.py",
        "subtree: bool = True",
        "subtree: bool = False",
        "tp.kernels(layer) takes the layer's subtree by default, as nsys projects a range onto what runs inside it",
        ("tests/test_api_questions.py",),
    ),
    Mutant(
        "one_shot_prints_the_last_result",
        "pipeline/analyze_cli.py",
        "    for statement in statements:\n        try:",
        "    for statement in statements[-1:]:\n        try:",
        "tracepipe sql prints every statement's result in order, as DuckDB's CLI does",
        ("tests/test_cli_surface.py::test_sql_prints_every_statements_result_in_order",),
    ),
    Mutant(
        "schema_prints_columns",
        "pipeline/analyze/shell.py",
        'self.say("\\n".join(self.ddl(name, scratch) for name in names))',
        "self.describe(names[0])",
        ".schema prints the CREATE statement of each table and view, as DuckDB's CLI does",
        ("tests/test_shell.py",),
    ),
    Mutant(
        "findings_twice_on_one_trace",
        "pipeline/report/build.py",
        "if mine.height == self.findings.height:",
        "if False:",
        "a one-trace report shows its findings once: the trace's section links to the opening table",
        ("tests/test_report_glance.py",),
    ),
    Mutant(
        "pivot_around_a_copy",
        "pipeline/analyze/readonly.py",
        '{"alter", "attach", "checkpoint", "copy", "create",',
        '{"alter", "attach", "checkpoint", "create",',
        "a PIVOT (a MULTI statement) runs only where no writing word wraps it: COPY (PIVOT ...) TO is refused",
        ("tests/test_api.py::test_the_read_only_connection_itself_refuses_writes_inside_the_folder",),
    ),
    Mutant(
        "pivot_prints_nothing",
        "pipeline/analyze/shell.py",
        "        duckdb.StatementType.MULTI,\n    }",
        "    }",
        "a PIVOT's rows are printed as a SELECT's",
        ("tests/test_cli_surface.py::test_sql_runs_a_pivot_and_a_session_variable",),
    ),
    Mutant(
        "start_end_range_ended_elsewhere",
        "sql/_point_ranges.sql",
        "AND r.kind = 'start_end' AND r.end_tid = r.tid AND",
        "AND r.kind = 'start_end' AND",
        "a start/end range ended on another thread holds no GPU work (nsys's nvtx_kern_sum reads none of them)",
        ("tests/test_attribution.py::test_start_end_range_ending_on_another_thread",),
    ),
    Mutant(
        "range_replay_called_an_old_layout",
        "pipeline/normalize/ncu.py",
        "if ranges and ranges == kernels.height:",
        "if False:",
        "a range replay's missing Grid/Block Size columns are not said to be an old ncu's layout",
        ("tests/test_start_end_ranges.py::test_ncu_range_replay_of_a_real_capture",),
    ),
    Mutant(
        "unended_ranges_dropped",
        "pipeline/normalize/nsys.py",
        "    WHERE n.eventType IN ({kinds})\n",
        '    WHERE n.eventType IN ({kinds}) AND n."end" IS NOT NULL\n',
        "a range the capture stopped inside (NULL end) lasts to the last NVTX timestamp, as nsys's reports read it",
        ("tests/test_start_end_ranges.py::test_a_range_the_capture_stopped_inside_lasts_to_the_last_nvtx_timestamp",),
    ),
    Mutant(
        "script_exit_skips_export",
        "pipeline/capture/runner.py",
        "    except SystemExit as e:\n        return e.code\n",
        "    except SystemExit:\n        raise\n",
        "a user script ending in sys.exit(main()) still gets its trace exported, and its status is the capture's",
        ("tests/test_capture.py::test_a_script_ending_in_sys_exit_keeps_its_trace",),
    ),
    Mutant(
        "trace_alone_drops_side_files",
        "pipeline/normalize_cli.py",
        "        files = with_capture_side_files(files)\n",
        "        files = list(files)\n",
        "a trace given alone reads its capture's side files (compiled_kernels.json, layer_shapes.json) beside it",
        ("tests/test_compiled.py::test_a_trace_given_alone_reads_its_captures_side_file",),
    ),
    Mutant(
        "compile_events_as_layers",
        "pipeline/normalize/chrome_map.py",
        '    r"^\\S+_data: (.+, )?compile_id=[^,]+(, .+)?$": ',
        '    r"^never a name$": ',
        "torch.compile's compile-phase record_function events are ops, not layer ranges",
        ("tests/test_compiled.py::test_compile_phase_events_are_ops_not_layers",),
    ),
    Mutant(
        "dot_command_query_as_sql",
        "pipeline/analyze_cli.py",
        "    if query is not None and is_dot_command(query):",
        "    if query is not None and False:",
        'tracepipe sql FOLDER ".tables" runs the shell\'s command, as duckdb FILE ".tables" does',
        ("tests/test_shell.py::test_a_dot_command_as_the_query_runs_as_in_the_shell",),
    ),
    Mutant(
        "late_export_advice_dropped",
        "pipeline/normalize/chrome_map.py",
        'and export_chrome_trace (with a schedule, export "',
        'and export_chrome_trace (export "',
        "an empty export of a scheduled profiler is told to export in on_trace_ready",
        ("tests/test_capture.py::test_a_scheduled_profilers_late_export_is_refused_saying_where_to_export",),
    ),
    Mutant(
        "findings_read_autotuning_kernels",
        "sql/findings.sql",
        "    FROM kernel_layers k\n    ANTI JOIN _autotuning_spans a\n",
        "    FROM kernel_layers k\n    LEFT JOIN _autotuning_spans a\n",
        "no findings rule reads the kernels of Inductor's autotuning (launched inside CachingAutotuner ops)",
        ("tests/test_compiled.py::test_no_finding_is_about_inductors_autotuning",),
    ),
    Mutant(
        "launch_bound_starves_autotuning",
        "sql/findings.sql",
        "    WHERE NOT o.tuning AND o.graph_node_id IS NULL",
        "    WHERE o.graph_node_id IS NULL",
        "launch_bound's stretches leave out the operations of Inductor's autotuning",
        ("tests/test_compiled.py::test_no_finding_is_about_inductors_autotuning",),
    ),
    Mutant(
        "global_hook_warning_shown",
        "pipeline/capture/runner.py",
        'warnings.filterwarnings("ignore", message=r"Using',
        'warnings.filterwarnings("default", message=r"Using',
        "a script capture hides PyTorch's warning about the capture's own global hooks under torch.compile",
        ("tests/test_compiled.py::test_capture_of_a_compiled_script_runs_and_records_its_graphs",),
    ),
    Mutant(
        "in_memory_keeps_statistics_propagation",
        "pipeline/analyze/write.py",
        "    if in_memory:\n        without_statistics_propagation(con)\n",
        "    if in_memory:\n        pass\n",
        "the in-memory path, whose views are DuckDB tables, turns off the pass that is wrong over empty tables",
        ("tests/test_duckdb_optimizer_guard.py",),
    ),
    Mutant(
        "temp_tables_keep_statistics_propagation",
        "pipeline/analyze/engine.py",
        "    if materialize or (lazy and read_only and scratch is None):",
        "    if False:",
        "a connection computing views into temp tables (materialize, the SQL shell's small traces) has it off",
        ("tests/test_duckdb_optimizer_guard.py",),
    ),
    Mutant(
        "disabled_optimizers_setting_dropped",
        "pipeline/analyze/engine.py",
        '        config["disabled_optimizers"] = off\n',
        "        pass\n",
        "TRACEPIPE_DISABLED_OPTIMIZERS reaches DuckDB's disabled_optimizers on the analysis connections",
        ("tests/test_duckdb_optimizer_guard.py",),
    ),
    Mutant(
        "damaged_manifest_is_a_crash",
        "pipeline/store.py",
        "    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError\n",
        "    except OSError as e:\n",
        "a manifest cut short or edited is bad input naming it (exit 2), not a JSON error (exit 1)",
        ("tests/test_store_safety.py::test_a_damaged_manifest_or_a_lost_trace_folder_is_named_not_a_crash",),
    ),
    Mutant(
        "gone_generation_not_read_again",
        "pipeline/store.py",
        "        if gen == named:  # named twice, and gone: removed by hand\n",
        "        if True:\n",
        "a generation gone under a manifest just read is read again (a writer's switch), not called damage",
        (
            "tests/test_store_safety.py::test_a_generation_removed_by_a_writer_switching_is_read_again_not_called_damage",
        ),
    ),
    Mutant(
        "damaged_parquet_is_a_crash",
        "pipeline/cli.py",
        "        if (damaged := damaged_parquet(e)) is not None:",
        "        if (damaged := damaged_parquet(e)) is not None and False:",
        "a Parquet file of a tracepipe folder cut short is bad input naming it (exit 2), not DuckDB's error (exit 1)",
        ("tests/test_store_safety.py::test_a_cut_parquet_file_is_named_with_the_command_that_writes_it_again",),
    ),
    Mutant(
        "views_over_other_inputs_reported",
        "pipeline/outputs.py",
        "    if len(stamps) < 2:\n        return None\n",
        "    if len(stamps) < 99:\n        return None\n",
        "a report refuses an analysis folder whose views were computed over different traces",
        ("tests/test_report.py::test_views_over_different_inputs_are_refused_and_views_added_later_are_not",),
    ),
    Mutant(
        "stamp_changes_with_every_view",
        "pipeline/analyze_cli.py",
        "    stamp = inputs_stamp({t: c.generation for t, c in committed(normalized).items()}, device)\n",
        "    stamp = inputs_stamp({t: c.generation for t, c in committed(normalized).items()}, str(only))\n",
        "a view written later over the same traces has its folder's stamp: adding a view leaves the report working",
        ("tests/test_report.py::test_views_over_different_inputs_are_refused_and_views_added_later_are_not",),
    ),
    Mutant(
        "creation_refused_is_a_crash",
        "pipeline/outputs.py",
        "        if fix is None and _creation_refused(e, Path(path)):\n",
        "        if False:\n",
        "no file creatable where a result goes (/proc) is a refused write naming it (exit 2), not an internal error",
        ("tests/test_hostile_outputs.py::test_a_place_that_takes_no_new_file_is_one_line_naming_it",),
    ),
    Mutant(
        "warnings_over_uncomputed_views",
        "pipeline/analyze_cli.py",
        '    also = () if quiet else ("analysis_warnings",)\n'
        "    inspect = None if quiet else lambda c: warned.extend(analysis_warnings(c))\n",
        "    from pipeline.analyze import create_views\n\n"
        "    also = ()\n"
        "    inspect = None if quiet else lambda c: warned.extend(\n"
        '        [create_views(c, sql_dir, only=["analysis_warnings"], keep_existing=True),'
        " *analysis_warnings(c)][1:]\n"
        "    )\n",
        "analyze's warnings are computed with the views, their inputs staged, not as one statement over every view",
        ("tests/test_report.py::test_demo_pipeline_on_every_sample",),
    ),
]


def tree_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def copy_tree(dest: Path) -> None:
    for rel in tree_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)


def pytest(tree: Path, tests: tuple[str, ...]) -> tuple[bool, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    summary = (failed or lines or [proc.stderr.strip()])[-1 if not failed else 0]
    return proc.returncode == 0, summary[:160]


def run(mutants: list[Mutant]) -> tuple[list[str], bool]:
    lines: list[str] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        for m in mutants:
            count = (tree / m.file).read_text().count(m.original)
            if count != 1:
                lines.append(f"STALE     {m.name}: original snippet found {count} times in {m.file}")
                ok = False
        if not ok:
            print("\n".join(lines), flush=True)
            return lines, ok
        guards = tuple(sorted({t for m in mutants for t in m.tests}))
        passed, summary = pytest(tree, guards)
        if not passed:
            lines = [f"BASELINE FAILS (unmutated tree): {summary}"]
            print(lines[0], flush=True)
            return lines, False
        for m in mutants:
            path = tree / m.file
            original = path.read_text()
            path.write_text(original.replace(m.original, m.mutated))
            t = time.perf_counter()
            try:
                survived, summary = pytest(tree, m.tests)
            finally:
                path.write_text(original)
            verdict = "SURVIVED" if survived else "killed"
            ok &= not survived
            line = f"{verdict:9s} {m.name:32s} {m.file:28s} ({time.perf_counter() - t:5.1f} s) {summary}"
            lines.append(line)
            print(line, flush=True)
    return lines, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="run the mutants whose name contains this (repeatable: any)")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--record", action="store_true", help=f"write the result to {RESULTS.relative_to(ROOT)}")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.only or any(part in m.name for part in args.only)]
    if args.list:
        for m in chosen:
            print(f"{m.name:32s} {m.file:28s} {m.rule}\n{'':33s}guarded by {', '.join(m.tests)}")
        return 0
    lines, ok = run(chosen)
    killed = sum(line.startswith("killed") for line in lines)
    total = f"{killed} of {len(chosen)} mutants killed" + ("" if ok else " -- FAILED")
    print(total)
    if args.record:
        sys.path.insert(0, str(ROOT))
        from benchmarks._measure import provenance

        argv = ["python", "scripts/mutants.py", *sys.argv[1:]]
        RESULTS.write_text(provenance(argv) + "\n" + "\n".join(lines) + "\n" + total + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
