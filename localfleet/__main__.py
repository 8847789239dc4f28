"""``python -m localfleet``: see ``localfleet.cli``."""

import sys

from localfleet.cli import main

sys.exit(main())
