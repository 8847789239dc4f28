"""The torch profiling job: a compact paged-KV transformer forward and the four measurements.

``profiling.models`` (architectures, torch-free) -> ``profiling.engine`` (the paged forward;
all device work) -> ``profiling.measure`` (prefill, decode, interference, KV bandwidth) ->
``solver.profile_result.ProfileResult`` -> ``profiling.io`` (``.pt`` / JSON files).

Importing this package does not import torch; the submodules that do device work do.
"""
