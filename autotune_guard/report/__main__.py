"""``python -m autotune_guard.report``."""

import sys

if __name__ == "__main__":  # not when a worker process imports this module again (spawn)
    try:
        from .cli import main

        status = main()
    except KeyboardInterrupt:  # Ctrl-C while the report's modules load (cli.main says it after)
        print("python -m autotune_guard.report: interrupted", file=sys.stderr)
        status = 130
    sys.exit(status)
