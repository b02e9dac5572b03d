"""Warnings a user can silence by name (``AUTOTUNE_DISABLE_WARNINGS``), as coverage.py's
``disable_warnings`` does: each such warning ends with its name in brackets, and a silenced one is
logged at DEBUG instead. What the guard did not govern, a fallback that costs speed, and an entry
refused or used under other numerics are not among them: the guard promises to name those."""

from __future__ import annotations

from .errors import PolicyError

# name -> what the warning says (docs/settings.md lists them)
SILENCEABLE = {
    "newer-triton": "Triton is newer than the newest release this package is tested with",
    "consensus-alone": "consensus without a process group: this process times alone, as in auto mode",
    "consensus-before-init": "consensus before init_process_group: those choices are this rank's own",
    "candidates-grew": "a kernel gained candidates since its table entry: only the new ones are timed",
    "pooling-run": "AUTOTUNE_POOL_RUNS: a table's key timed again to pool its winner over cold runs",
    "table-replaced": "a table entry replaced by a winner chosen to replace it (pooled, re-tuned): the old one kept beside it",
    "shared-name": "two different kernels launched under one name: the later one gets name@hash",
    "unmatched-user-kernel": "a torch.compile user kernel matched none Dynamo traced: named by Inductor, key '*'",
    "split-join-window": "split tuning: some ranks did not come to a key's join window",
    "late-determinism": "a determinism switch turned on after the mode was settled: the choices stay timed",
    "shared-directory": "the evidence files go to a directory other users can write",
    "table-files-only": "consensus with table files only: nowhere to add what the job tunes",
    "helion-collective-search": "Helion searches a kernel across the job's ranks: every rank takes part in one search",
}


def parse(var: str, value) -> tuple[str, ...]:
    """A comma-separated list of warning names, each one of SILENCEABLE."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(str(item).strip() for item in items if str(item).strip())
    unknown = [name for name in names if name not in SILENCEABLE]
    if unknown:
        raise PolicyError(f"{var}={value!r}: {', '.join(repr(n) for n in unknown)} "
                          f"{'is' if len(unknown) == 1 else 'are'} not a warning that can be silenced "
                          f"(allowed: {', '.join(SILENCEABLE)})", variable=var, value=value, allowed=tuple(SILENCEABLE))
    return names
