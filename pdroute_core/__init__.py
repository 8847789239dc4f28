"""pdroute's model core: the decision models and the params format, pure Python and numpy.

No I/O and nothing else of pdroute is imported here, so the same code decides in the service,
in the fleet simulator and, shipped alone, in the gateway client's local tier.
"""
