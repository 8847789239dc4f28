"""The ``pdroute`` command line: the offline tools and the command that starts the service.

``main`` (the parser and ``main``), ``usage`` (the one usage error), ``commands`` (one module per
subcommand), ``conformance`` (the conformance vectors ``pdroute conformance`` writes).
"""
