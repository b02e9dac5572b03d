"""Tables on a Redis server (``AUTOTUNE_TABLE_PATH=redis://...``): ``client`` (one store: its keys,
read and add scripts; the one module that imports ``redis``) and ``stores`` (the process's stores,
what it reads per kernel and what it says of a store down or refusing)."""

from .client import (LIST_GRANTS, PIECE, READ_GRANTS, TIMEOUT_S, WRITE_GRANTS, Store, StoreDown, StoreNoPermission,
                     StoreRefused)
from .stores import Stores, configure, kernel_version_differs, stores

__all__ = ["LIST_GRANTS", "PIECE", "READ_GRANTS", "TIMEOUT_S", "WRITE_GRANTS", "Store", "StoreDown",
           "StoreNoPermission", "StoreRefused", "Stores", "configure", "kernel_version_differs", "stores"]
