"""pdroute's pure core: the analytical cost model, its fitting, and the P/D split solver.

Nothing in this package reads the environment, the clock or files, except the explicit
load/save helpers that take a path. It never imports ``app`` or ``profiling`` (no torch).
"""
