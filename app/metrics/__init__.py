"""The service's Prometheus series, on an injected ``CollectorRegistry`` (never the global one).

``service`` (every series of the service, ``Metrics``), ``loop`` (the lock-free histograms and
counters updated on the event loop thread), ``calibration`` and ``output_length`` (the online
learners' series). The engine scraper's series are in ``app.engines.metrics``.
"""
