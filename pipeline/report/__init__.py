"""``tracepipe report``: the analysis folder as report.html, PNG figures and a terminal summary.

``build.build_report`` does the work; ``data`` reads the views, ``tables`` shapes them (polars), ``plots``
draws (matplotlib, Agg) and ``html`` renders the page. Kept import-free so that registering the command in
``pipeline.cli`` costs the other commands nothing.
"""
