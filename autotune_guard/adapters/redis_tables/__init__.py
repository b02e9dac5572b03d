"""Tables on a Redis server (``AUTOTUNE_TABLE_PATH=redis://...``): ``client`` (one store: its keys,
reads and transactions; the one module that imports ``redis``), ``scripts`` (its server-side
scripts), ``parts`` (a kernel's part of a table and what a write changes in it), ``stores`` (the
process's stores, what it reads per kernel, grows, and says of a store down or refusing) and
``upgrade`` (the older one-hash layout moved to per-kernel keys)."""

from .client import (LIST_GRANTS, MAX_KERNEL_FIELDS, PIECE, READ_GRANTS, TIMEOUT_S, WRITE_GRANTS, Store, StoreBusy,
                     StoreDown, StoreNoPermission, StoreRefused, StoreTooBig)
from .parts import version_differs as kernel_version_differs
from .stores import Stores, configure, stores
from .upgrade import Upgraded, upgrade

__all__ = ["LIST_GRANTS", "MAX_KERNEL_FIELDS", "PIECE", "READ_GRANTS", "TIMEOUT_S", "WRITE_GRANTS", "Store", "StoreBusy",
           "StoreDown", "StoreNoPermission", "StoreRefused", "StoreTooBig", "Stores", "Upgraded", "configure",
           "kernel_version_differs", "stores", "upgrade"]
