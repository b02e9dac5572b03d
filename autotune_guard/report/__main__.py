"""``python -m autotune_guard.report``."""

import sys

from .cli import main

if __name__ == "__main__":  # not when a worker process imports this module again (spawn)
    sys.exit(main())
