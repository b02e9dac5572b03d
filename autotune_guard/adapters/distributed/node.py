"""Consensus's node-level fan-in: the job's Store with a Store of the node beside it.

torchrun gives each worker its node (``GROUP_RANK``) and how many workers share it
(``LOCAL_WORLD_SIZE``). The node's Store is a c10d ``FileStore`` in the node's temporary
directory, named by the job, the restart and the node: no process hosts it, so a rank that dies
takes nothing of its node's with it, and a restart never meets the names of the attempt before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
import tempfile

from ...core.consensus import attempt_scope

logger = logging.getLogger("autotune_guard")


class FannedStore:
    """The job's Store (every c10d method, ``job``) with the node's (``node_store``), which
    ``core.consensus.decide`` uses for the node's ranks."""

    def __init__(self, job, node_store, path: str):
        self.job, self.node_store, self.path = job, node_store, path

    def __getattr__(self, name):
        return getattr(self.job, name)


def node_of_this_process() -> str | None:
    """The node's name within the job, or None where no node is shared (not torchrun, or one
    worker per node: nothing to fan in)."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    node = os.environ.get("GROUP_RANK", "")
    if not (local.isdigit() and int(local) > 1 and node.isdigit()):
        return None
    job = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    return f"{attempt_scope()}|{job}|{node}|{socket.gethostname()}"


_made: dict = {}  # id(job store) -> FannedStore, with the job store kept alive beside it


def fanned(job_store):
    """``job_store`` with its node's Store, made once per process and job Store; ``job_store``
    itself where there is no node to share, or its Store cannot be made (said once)."""
    node = node_of_this_process()
    if node is None:
        return job_store
    found = _made.get(id(job_store))
    if found is not None and found[0] is job_store:
        return found[1]
    digest = hashlib.sha256(node.encode()).hexdigest()[:24]
    folder = os.path.join(tempfile.gettempdir(), f"autotune_guard-{os.getuid()}")
    path = os.path.join(folder, f"node-{digest}.store")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        store = FannedStore(job_store, sys.modules["torch.distributed"].FileStore(path, -1), path)
    except Exception as exc:
        logger.warning("consensus: the node's Store %s could not be made (%r): this rank asks the job's Store itself",
                       path, exc)
        store = job_store
    _made[id(job_store)] = (job_store, store)
    return store
