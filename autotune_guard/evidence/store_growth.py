"""A table store grows by what consensus tunes (``AUTOTUNE_MODE=consensus`` with a Redis URL in
``AUTOTUNE_TABLE_PATH``): the store's counterpart of ``evidence.table_growth`` for a table directory.

A winner this process tuned for its whole job (``Guard.tuned_for_job``) is added shortly after the
choice, by a background thread subscribed to the ``Guard``, and once more at exit. It is written by
the one rule of every table write (``core.table_writes.grow_table``, as a table directory grows:
the first writer wins unless the winner was chosen to replace, pooled winners pool again over every
run the table holds, and nothing is lost), made to the kernel's part of the store in one
transaction against other writers (``redis_tables.Stores.grow_kernel``), with its measurements. A
differing entry kept, an entry replaced, a kernel held against another version of it, and
measurements that had to be left out are said once. The store is reached through the
``table_store`` fact (``adapters.redis_tables.Stores``), never by importing the client. A store that
stops answering is said once (``Stores.went_down``): the winners stay chosen in this process and its
evidence files; they are tried once more at exit."""

from __future__ import annotations

import logging

from .. import evidence
from ..core.store_url import hide_password, store_urls
from ..runtime import current
from . import growth_words
from .writer import WriterShell, held_growth

logger = logging.getLogger("autotune_guard")


class StoreGrowth(WriterShell):
    """The writer shell of the store growth (its lock: one flush at a time in this process), and
    what the growth knows."""

    def __init__(self):
        # Adds new winners shortly after they are chosen, off the launch path.
        super().__init__(flush, interval_s=0.2, thread_name="autotune_guard-store",
                         failure="could not add this job's winners to the table store: %s")
        self.url: str | None = None  # where this policy's winners go; None: nowhere
        self.stores = None
        self.written: set = set()  # ChoiceKeys put in the store (or found there)
        self.added = 0

    def renew(self) -> None:
        self.written = set()  # the parent adds its own winners


def _state(make: bool = True) -> StoreGrowth | None:
    """The growth's state; None where none was needed yet and ``make`` is false."""
    return held_growth("evidence.store_growth", StoreGrowth, _changed, _at_exit, make)


def configure(guard, policy) -> None:
    """Where ``policy``'s winners are added: the first store URL of its table path, in consensus,
    through the store writer the adapter registered (the ``table_store`` fact: adapters.redis_tables)."""
    urls = store_urls(policy.table_path) if policy is not None and policy.mode == "consensus" else []
    state = _state(make=bool(urls))
    if state is None:
        return
    stores = guard.facts.get("table_store") if urls else None
    state.url, state.stores, state.added = (urls[0] if urls and stores is not None else None), stores, 0
    state.written = set()  # a new policy's epoch tunes anew


def flush() -> None:
    """Add this process's winners not added yet to the store, now."""
    state, guard = _state(), current()
    with state.lock:
        url, stores = state.url, state.stores
        pending = {key: desc for key, desc in list(guard.epoch.tuned.items()) if key not in state.written}
        if url is None or not pending or url in stores.down:
            return
        grouped: dict = {}
        for key, desc in pending.items():
            grouped.setdefault((key.arch, key.kernel), {})[key.key] = desc
        for (arch, kernel), entries in sorted(grouped.items()):
            if url in stores.down or not _add(guard, stores, url, arch, kernel, entries):
                return  # said once; what is left is tried again at exit
            state.written.update(k for k in pending if (k.arch, k.kernel) == (arch, kernel))


def _add(guard, stores, url: str, arch: str, kernel: str, entries: dict) -> bool:
    """One kernel's new winners written (``Stores.grow_kernel``); False when the store did not
    answer, refused the write, or was busy (each said once)."""
    live = next((getattr(d, "provenance", None) for d in entries.values() if getattr(d, "provenance", None)), None)
    found = stores.grow_kernel(url, arch, kernel, entries, evidence.entry_author(guard),
                               guard.facts.get("config_defaults") or {}, live)
    if found is None:
        return False
    growth_words.say(guard, f"table store {hide_password(url)}", arch, lambda kernel, key: entries[key], found)
    _state().added += found.count
    return True


def _at_exit() -> None:
    state = _state(make=False)
    if state is None or state.url is None:
        return
    flush()
    if state.added:
        logger.info("added %d entr%s this process tuned to the table store %s", state.added,
                    "y" if state.added == 1 else "ies", hide_password(state.url))


def _changed() -> None:
    """A new choice: wake the writer when this process tuned something not added yet."""
    state = _state(make=False)
    if state is not None and state.url is not None and len(current().epoch.tuned) > len(state.written):
        state.wake()
