"""What a process says at exit about its choices: the exit line (count, fallbacks, digest, kernels
not governed) and, at INFO on rank 0, a short table of what it chose and how (the words of
``core.model.HOW``: timed, table, consensus, fallback (min_cost), ...), cut at ``ROWS`` rows.
``AUTOTUNE_LOG_LEVEL=warning`` silences the table; a fallback's own warning was said when it
happened."""

from __future__ import annotations

import logging

from ..core.misses import fix_hint, miss_reasons
from ..core.model import AT_EXIT, digest_of, hows, is_fallback, log_text

logger = logging.getLogger("autotune_guard")

ROWS = 20
_WIDTHS = (40, 32, 48)  # kernel, key, config: longer texts are cut with '...'
REFUSED_SHOWN = 20  # keys the exit's refusal names one a line; the rest are counted


def say_at_exit(guard, rank: int, policy) -> None:
    """Log the exit line and, on rank 0, the table of what this process chose."""
    epoch = guard.epoch
    with epoch.log.lock:
        entries = dict(epoch.log.entries)
    picked = dict(epoch.picked)
    missed = dict(guard.ungoverned)
    if not entries and not missed:
        return
    fallbacks = sum(1 for choice in entries.values() if is_fallback(choice.how))
    log = log_text(entries)
    # The digest names the configs only; how they were chosen is said beside it.
    logger.info("rank %d made %d autotune choice%s%s, digest %s%s%s", rank, len(entries), "s" * (len(entries) != 1),
                f" ({fallbacks} of them fallbacks: keys the tables lacked)" if fallbacks else "",
                digest_of(log), f" ({hows(log)})" if log else "",
                f"; {len(missed)} not governed: {', '.join(sorted(missed)[:5])}"
                f"{' ...' if len(missed) > 5 else ''}" if missed else "")
    refused = [key for key in epoch.refused if picked.get(key) == AT_EXIT]
    for line in refused_lines(refused, policy, guard.stores_down()):
        logger.error("%s", line)
    if rank == 0 and epoch.split:
        logger.info("%s", split_line(dict(epoch.split)))
    if rank == 0 and entries and logger.isEnabledFor(logging.INFO):
        stopped = [key for key in epoch.refused if picked.get(key) != AT_EXIT]  # AUTOTUNE_ON_MISS=error raised
        for line in table_lines(entries, policy, stopped):
            logger.info("%s", line)


def refused_lines(refused: list, policy, down) -> list[str]:
    """AUTOTUNE_ON_MISS=error_at_exit: every key this process refused (it ran min_cost for them),
    why the tables did not serve the first, and the fix; ``_boot`` then ends the process with status 1."""
    if not refused:
        return []
    first = refused[0]
    lines = [f"refused at exit (AUTOTUNE_ON_MISS=error_at_exit): {len(refused)} key{'s' * (len(refused) != 1)} "
             "the tables lack, run with min_cost; the process fails:"]
    lines += [f"  {key.what()}" for key in refused[:REFUSED_SHOWN]]
    lines += [f"  ... and {len(refused) - REFUSED_SHOWN} more"] if len(refused) > REFUSED_SHOWN else []
    lines.append(f"tables: {'; '.join(miss_reasons(policy.table_path, first.arch, first.kernel, first.key, down))}")
    lines.append(f"fix: {fix_hint(policy.table_path, first.arch)}")
    return lines


def split_line(split: dict) -> str:
    """Split tuning's one line for the job (rank 0): the keys divided among the ranks, and how many
    candidates this rank timed against the all that one rank times under plain consensus."""
    here, every = sum(timed for timed, _ in split.values()), sum(count for _, count in split.values())
    return (f"split tuning (AUTOTUNE_CONSENSUS_SPLIT=1): {len(split)} key{'s' * (len(split) != 1)} tuned with "
            f"{'its' if len(split) == 1 else 'their'} {every} candidates divided among the ranks; rank 0 timed "
            f"{here} of the {every} (plain consensus: one rank times all {every})")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def table_lines(entries: dict, policy, stopped=()) -> list[str]:
    """The rows (first choices first), a header, and where to find the rest; ``stopped``: keys the
    guard refused (the refusal said why), in the header and at the end so the table never reads as a success."""
    rows = [(key.kernel, key.key, choice.signature, choice.how) for key, choice in entries.items()]
    shown = rows[:ROWS]
    widths = [min(w, max(len(r[i]) for r in shown + [("kernel", "key", "config", "how")])) for i, w in enumerate(_WIDTHS)]
    count = f"{len(rows)} choice{'s' * (len(rows) != 1)}"
    lines = [f"what this process chose before the guard refused {len(stopped)} key"
             f"{'s' * (len(stopped) != 1)} ({count}; the run was refused):" if stopped
             else f"what this process chose ({count}):"]
    for row in [("kernel", "key", "config", "how")] + shown:
        lines.append("  " + "  ".join(_cut(text, w).ljust(w) for text, w in zip(row, widths)) + "  " + row[3])
    prefix = policy.digest_path or policy.record_path
    where = (f"python -m autotune_guard.report show {prefix}" if prefix else
             "AUTOTUNE_DIGEST_PATH=runs/choices keeps them all, then python -m autotune_guard.report show runs/choices")
    if len(rows) > ROWS:
        lines.append(f"  ... and {len(rows) - ROWS} more: {where}")
    lines += [f"refused (the reason above): {key.what()}" for key in stopped[:REFUSED_SHOWN]]
    return lines
