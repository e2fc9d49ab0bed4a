"""``python -m codemode_trio.faults``: run a host with injected faults."""

import sys

from .proxy import main

sys.exit(main())
