"""Tables on a Redis server (``AUTOTUNE_TABLE_PATH=redis://...``): ``client`` (one store: its keys,
reads and transactions; the one module that imports ``redis``), ``scripts`` (its server-side
scripts), ``parts`` (a kernel's part of a table and what a write changes in it) and ``stores`` (the
process's stores, what it reads per kernel, grows, and says of a store down or refusing)."""

from .client import (LIST_GRANTS, PIECE, READ_GRANTS, TIMEOUT_S, WRITE_GRANTS, Store, StoreBusy, StoreDown,
                     StoreNoPermission, StoreRefused)
from .parts import version_differs as kernel_version_differs
from .stores import Stores, configure, stores

__all__ = ["LIST_GRANTS", "PIECE", "READ_GRANTS", "TIMEOUT_S", "WRITE_GRANTS", "Store", "StoreBusy", "StoreDown",
           "StoreNoPermission", "StoreRefused", "Stores", "configure", "kernel_version_differs", "stores"]
