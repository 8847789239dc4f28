"""Profile sources other than the torch profiler: each returns a ``solver.ProfileResult``.

``profiling.sources.aiconfigurator`` estimates the profile grids from NVIDIA aiconfigurator's
performance database (CPU only, no torch), for GPUs you do not own. The service never imports
this package.
"""
