"""Everything that touches ``torch.distributed``: rank, barrier-fired verification, the job's Store.

torch is never imported from here at start-up: each function looks at ``sys.modules`` first, so
a process that never imported torch.distributed pays nothing.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("autotune_guard")

_RANK_VARIABLES = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))


def initialized_dist():
    """``torch.distributed`` when a default process group exists, else None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the job's size: the process group when initialized, else
    ``RANK``, ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``, else 0 of 1."""
    dist = initialized_dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    for rank_var, world_var in _RANK_VARIABLES:
        rank = os.environ.get(rank_var, "")
        if rank.isdigit():
            world = os.environ.get(world_var, "")
            return int(rank), int(world) if world.isdigit() else int(rank) + 1
    return 0, 1


def wrap_barriers(module) -> None:
    """Post-import hook of ``torch.distributed`` (verification: see verify_choices)."""


def reset_cadence() -> None:
    """Forget barrier counts (a new policy starts a new cadence)."""


# --- the job's c10d Store (consensus) ---------------------------------------------------------
# Coordination goes through the Store that torchrun (or init_process_group) already started, never
# through a collective at the moment of choice: ranks reach kernels at different times, and
# pipeline or expert ranks run different kernels, so a collective there would deadlock.

_STORE_PREFIX = "autotune_guard/"


def job_store():
    """The default process group's Store, or None when this process is not distributed."""
    dist = initialized_dist()
    if dist is None:
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:
        return None


def store_claim(store, name: str) -> bool:
    """Atomically claim ``name`` for this rank; True for exactly one caller in the job."""
    return store.add(_STORE_PREFIX + name + "/claim", 1) == 1


def store_set(store, name: str, value: str) -> None:
    store.set(_STORE_PREFIX + name, value)


def store_wait(store, name: str, timeout_s: float) -> str | None:
    """The value published under ``name``, or None after ``timeout_s`` seconds."""
    from datetime import timedelta

    key = _STORE_PREFIX + name
    try:
        store.wait([key], timedelta(seconds=timeout_s))
    except Exception:  # torch raises a RuntimeError/DistStoreError subclass on timeout
        if not store.check([key]):
            return None
    return store.get(key).decode()
