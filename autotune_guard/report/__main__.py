"""``python -m autotune_guard.report``."""

import sys

from .cli import main

sys.exit(main())
