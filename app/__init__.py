"""pdroute's edges: the HTTP service (``app.main.create_app``) and the ``pdroute`` command line.

The service: ``main`` (the factory and lifespan), ``settings``, ``deps``, ``params_store``,
``reload``, ``grid_limit``, and the packages ``http`` (the edge: envelope, connection limits,
error bodies, JSON), ``routes`` (one module per resource), ``schemas``, ``metrics``,
``learners`` (online calibration and output-length learning) and ``engines`` (auto-fill from
the engines' metrics). The command line is ``cli`` (``cli.commands``: one module per
subcommand); the service never imports it.

Nothing here imports torch or aiconfigurator at import time; the profiling subcommands import
``profiling`` lazily.
"""
