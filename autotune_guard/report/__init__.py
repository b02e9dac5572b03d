"""``python -m autotune_guard.report``: read record and choices files, merge records into a table,
compare two runs.

    python -m autotune_guard.report [show] FILES...              what each rank chose (or a table holds), per kernel and key
    python -m autotune_guard.report merge FILES... -o TABLE.json  records -> a table for pinned mode
    python -m autotune_guard.report diff RUN_A RUN_B             two runs' choices: same, changed, only in one
    python -m autotune_guard.report import [CACHE_DIR] --arch A -o TABLE.json   Triton's autotune disk cache -> a table
    python -m autotune_guard.report retune TABLE --kernel K [--key KEY]   the next consensus run times them again
    python -m autotune_guard.report prune TABLE [--stale RUN] [--kernel K] [--superseded] [--dry-run]   drop entries
    python -m autotune_guard.report audit TABLE...              entries one draw froze that other draws contradict

A FILE (and each side of ``diff``) is a file, a glob pattern, or the prefix given to
``AUTOTUNE_RECORD_PATH`` / ``AUTOTUNE_DIGEST_PATH`` (``runs/rec`` reads ``runs/rec.rank*.json``).
Human-readable output by default, ``--json`` for machines, ``--format markdown`` for a CI job
summary or a pull-request comment (show and diff).  Exit status: 0 done, 1 ranks or runs
disagree and ``--check`` was given, 2 unusable input (one line on stderr naming the file).

This is the CLI's own output, so it prints; it never imports Triton or torch.
"""

from .cli import main

__all__ = ["main"]
