"""Every pdroute figure, as PNG files: the one home of matplotlib in the project.

* ``costmodel``: the four figures of a fitted cost model (``pdroute plot``, ``plot_all``);
* ``plan``: the planner's heatmaps, policy map and curve fits (``pdroute plan-grid``);
* ``sim``: a simulator sweep's latency-against-load and latency CDF (``pdroute simulate``);
* ``figure``: what they share: a ``Figure`` on an Agg canvas and saving it.

matplotlib (the ``plots`` extra) is imported inside the drawing functions only, so importing
this package, or anything in ``solver`` and ``app``, never loads it: the service runs without it.
"""
