"""Parts ``tracepipe analyze --device`` can project a trace onto (no imports: the CLI reads it at start-up)."""

from __future__ import annotations

#: ``tracepipe analyze --device NAME``: a part whose limits replace the traced device's, so occupancy, waves
#: and the SM map are recomputed as if the same launches ran there.  Only the compute capability (the row of
#: ``ARCH_ROWS`` that supplies every per-SM limit) and the SM count are per part.
#: name -> (part, compute capability, SMs)
DEVICE_PRESETS: dict[str, tuple[str, tuple[int, int], int]] = {
    "rtx3090": ("GeForce RTX 3090", (8, 6), 82),
    "rtx4090": ("GeForce RTX 4090", (8, 9), 128),
    "a100": ("A100 SXM4", (8, 0), 108),
    "h100": ("H100 SXM5", (9, 0), 132),
    "h200": ("H200", (9, 0), 132),
    "v100": ("Tesla V100", (7, 0), 80),
    "t4": ("Tesla T4", (7, 5), 40),
}
