"""The pydantic models of the HTTP API: ``route`` (``/route``, ``/route/batch``, ``/params``,
``/admin/reload`` and every error body), ``feedback`` (``/feedback``), ``plan`` (``/plan``)."""
