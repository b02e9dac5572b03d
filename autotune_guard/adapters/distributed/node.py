"""Consensus's node-level fan-in: the job's Store with a Store of the node beside it.

torchrun gives each worker its node (``GROUP_RANK``) and how many workers share it
(``LOCAL_WORLD_SIZE``). The node's Store is a c10d ``FileStore`` named by the job, the restart
and the node: no process hosts it, so a rank that dies takes nothing of its node's with it, and a
restart never meets the names of the attempt before.

It lies in a directory only this user can use (``core.safe_files``): ``$XDG_RUNTIME_DIR`` when it
is this user's, else ``<tmp>/autotune_guard-<uid>``, made with mode 0700 and checked for owner,
mode and symlink after; one another user made or planted is refused by name (the ranks then ask the
job's Store). The node's last rank to leave removes the file at exit.

The node's Store is made once per job Store object and kept by the Guard (``NODE_STORES``), for as
long as that job Store lives.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
import sys

from ...core import safe_files
from ...core.consensus import attempt_scope
from ...deciding.stores import ByStore
from ...runtime import EXIT_NODE, current

logger = logging.getLogger("autotune_guard")


class FannedStore:
    """The job's Store (every c10d method, ``job``) with the node's (``node_store``), which
    ``deciding.consensus.decide`` uses for the node's ranks."""

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
    return f"{attempt_scope(os.environ)}|{job}|{node}|{socket.gethostname()}"


NODE_STORES = "distributed.node_stores"  # the Guard's held ByStore: job Store -> its FannedStore (or itself)


def fanned(job_store):
    """``job_store`` with its node's Store, made once per process and job Store; ``job_store``
    itself where there is no node to share, or its Store cannot be made (said once)."""
    node = node_of_this_process()
    if node is None:
        return job_store
    guard = current()
    made = guard.held(NODE_STORES, ByStore)
    found = made.get(job_store)
    if found is not None:
        return found
    digest = hashlib.sha256(node.encode()).hexdigest()[:24]
    path = os.path.join(safe_files.node_files_directory(), f"node-{digest}.store")
    try:
        safe_files.private_directory(os.path.dirname(path))
        store = FannedStore(job_store, sys.modules["torch.distributed"].FileStore(path, -1), path)
        guard.on_exit(functools.partial(_leave, store, os.getpid()), EXIT_NODE)
    except Exception as exc:
        logger.warning("consensus: the node's Store %s could not be made (%s): this rank asks the job's Store itself",
                       path, exc)
        store = job_store
    return made.get(job_store, lambda: store)


LEFT = "autotune_guard/node/left"  # in the node's Store: how many of its ranks have exited


def _leave(store: FannedStore, pid: int) -> None:
    """At exit: count this rank out; the node's last rank removes the Store's file (a forked child
    that exits normally is not a rank of the node)."""
    if os.getpid() != pid:
        return
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
        if store.node_store.add(LEFT, 1) >= local:
            os.unlink(store.path)
    except Exception as exc:
        logger.debug("consensus: the node's Store %s was not removed: %s", store.path, exc)
