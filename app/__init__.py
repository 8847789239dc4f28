"""pdroute's edges: the HTTP service (``app.main.create_app``) and the ``pdroute`` command line.

Nothing here imports torch or aiconfigurator at import time; the profiling subcommands import
``profiling`` lazily.
"""
