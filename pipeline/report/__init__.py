"""``tracepipe report``: the analysis folder as report.html, PNG figures and a terminal summary.

``build.build_report`` does the work; ``data`` reads the views, ``tables`` shapes them (polars), ``plots``
draws (matplotlib, Agg) and ``html`` renders the page. Kept import-free so that registering the command in
``pipeline.cli`` costs the other commands nothing.
"""

#: Traces whose figures the page embeds, those with the most GPU time; every other trace's figures are PNG files
#: beside it, linked: the page stays readable (and under 2 MB for the demo's ~30 traces) however many traces an
#: analysis holds (``tracepipe report --figures``).
EMBEDDED_FIGURES = 12
