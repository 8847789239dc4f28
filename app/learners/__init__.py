"""The service's online learners, fed by ``POST /feedback`` and the proxy's observations.

``calibration`` (per-term corrections of the queue-aware model, a calibrated model swapped in
for ``/route``), ``output_length`` (the output-length correction per prompt bucket), ``recent``
(the bounded map of recent decisions by request id that feedback is matched against).
"""
