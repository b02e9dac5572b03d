"""This process's rank, and the job's c10d Store (consensus coordinates through it).

torch is never imported here: each function looks at ``sys.modules``, so a process that never
imported torch.distributed pays nothing.
"""

from __future__ import annotations

import os
import sys

from ...core.errors import StoreError
from .node import fanned

RANK_VARIABLES = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
                  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
INHERITED_RANK = "_AUTOTUNE_GUARD_RANK"  # "rank:world" of the guarded process that started this one


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
    """This process's rank and the job's size now: the process group when initialized, else
    ``RANK``, ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``, else 0 of 1."""
    dist = initialized_dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    for rank_var, world_var in RANK_VARIABLES:
        rank = os.environ.get(rank_var, "")
        if rank.isdigit():
            world = os.environ.get(world_var, "")
            return int(rank), int(world) if world.isdigit() else int(rank) + 1
    return 0, 1


def process_rank() -> tuple[int, int]:
    """This process's (rank, world size) as its evidence is filed (the "rank_world" fact, read
    once): a program that later destroys its group or changes RANK keeps the rank it chose as.

    ``rank_and_world()``; but a process with neither a group nor a rank variable takes the rank of
    the guarded process that started it (data-loader workers of an ``mp.spawn`` rank), and passes
    its own on to the processes it starts."""
    inherited = os.environ.get(INHERITED_RANK, "")
    if initialized_dist() is None and inherited and not any(os.environ.get(v) for v, _ in RANK_VARIABLES):
        rank, _, world = inherited.partition(":")
        found = (int(rank), int(world)) if rank.isdigit() and world.isdigit() else rank_and_world()
    else:
        found = rank_and_world()
    os.environ[INHERITED_RANK] = f"{found[0]}:{found[1]}"
    return found


def job_store(node: bool = True):
    """The default process group's Store, or None when this process is not distributed: the one
    way to it, for consensus and verification alike. ``node``: with its node's Store beside it
    (``node.fanned``) where torchrun runs several workers per node (consensus's fan-in); False:
    the job's Store alone (verification's tree, whose edges cross nodes).

    torch has no public accessor for it (2.13 included), hence ``_get_default_store``. A group
    whose Store cannot be had raises StoreError: ranks must not choose alone when asked to agree."""
    dist = initialized_dist()
    if dist is None:
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
    except Exception as exc:
        raise StoreError(f"the default process group is initialized but its Store cannot be reached "
                         f"(torch.distributed.distributed_c10d._get_default_store: {exc!r})") from exc

    return fanned(store) if node else store
