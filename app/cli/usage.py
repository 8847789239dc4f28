"""The one command-line usage error: a bad argument or option, reported as one line.

``app.cli.main`` prints every ``PdrouteError`` (this one included) as
``pdroute <command>: error: <message>`` on stderr and exits 2, never with a traceback.
"""

from __future__ import annotations

from pdroute_core.errors import PdrouteError


class UsageError(PdrouteError):
    """A command-line argument or option is unusable; the message names the flag."""
