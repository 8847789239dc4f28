"""The HTTP edge: the request envelope, the connection limits, error bodies and the answers' JSON.

``envelope`` (the one middleware every request goes through; it answers ``/route`` and
``/route/batch`` itself), ``protocol`` (the request-head and request-timeout limits uvicorn is
given), ``error_body`` (every error body), ``errors`` (domain and validation errors mapped to
HTTP, in one place), ``json_codec`` (the per-request answers' JSON bytes), ``route_codec`` (the
``/route`` answer derived from the model's breakdown), ``bearer`` (the token check of the
endpoints that change state).
"""
