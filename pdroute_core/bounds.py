"""The limits of the ``/route`` inputs and of a batch, and the design inputs' defaults.

Upper bounds are far beyond any real request and low enough that the arithmetic stays exact
(token counts stay well inside a double's 2^53 integers). Each input's range is stated in its
row of ``pdroute_core.route_fields``, the table the service's schema and the gateway client
both enforce.
"""

from __future__ import annotations

MAX_PROMPT_LEN = 16_777_216  # 16M tokens
MAX_OUTPUT_LEN = 16_777_216
MAX_LOAD = 1_000_000
MAX_CHUNK = 16_777_216
MAX_TOKENS = 2**44  # token totals over many requests (queues, contexts): ~1.8e13
MAX_GPUS = 100_000
MAX_SLO_MS = 86_400_000.0  # a day
MAX_TOKENS_PER_S = 1e9  # a GPU's prefill rate (tokens/s): a thousand times any GPU's
MAX_REQUEST_ID_LEN = 256
MAX_BATCH_ITEMS = 100_000  # hard cap; the service's settings.max_batch_requests sets the served limit

DEFAULT_DECODE_BATCH_SIZE = 1  # decode_batch_size when a request omits it
DEFAULT_CHUNK_SIZE = 256  # chunk_size when a request omits it
