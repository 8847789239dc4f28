"""pdroute's offline maths: fitting, the profile contract, planning, simulation and plots.

The decision models themselves live in ``pdroute_core`` (shared with the service, the gateway
client and the simulator); this package fits their parameters from a profile (``fit``,
``fit_queue``), reads and writes params and profiles (``params``, ``profile_result``,
``profile_io``), sizes clusters (``plan``), replays traces through a P/D fleet (``sim``) and
draws figures (``plots``). It is never on the per-request path. Nothing here reads the
environment or the clock, and files only through the explicit load/save helpers that take a
path. It never imports ``app`` or ``profiling`` (no torch).
"""
