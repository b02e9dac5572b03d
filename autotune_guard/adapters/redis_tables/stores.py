"""The process's table stores (held on the Guard): the reader ``core.tables.load_tables`` gets
through the ``table_store`` fact, one kernel at a time, and the writer ``evidence.store_growth``
calls through it; what a store down, or refusing this user, means for the job is said here once."""

from __future__ import annotations

from ...core.errors import PolicyError
from ...core.model import provenance_differences
from ...core.store_url import hide_password, store_urls
from ...core.store_values import merge, new_document
from ...runtime import current
from .client import READ_GRANTS, TIMEOUT_S, WRITE_GRANTS, Store, StoreDown, StoreNoPermission, StoreRefused


class Stores:
    """Each URL's client, and what this process knows of each store (down, refused a write, older layout)."""

    def __init__(self):
        self.stores: dict[str, Store] = {}
        self.down: set[str] = set()  # URLs said to be down: not asked again by this process
        self.why: dict[str, str] = {}  # URL -> what it met when it went down (the node's others say it)
        self.no_write: set[str] = set()  # URLs whose user the server refused a write: not asked to add again
        self.older: dict = {}  # (URL, arch) -> the arch's table in the older layout, read whole once

    def store(self, url: str) -> Store:
        if url not in self.stores:
            self.stores[url] = Store(url)
        return self.stores[url]

    # core.store_snapshot.Node: whose and where the snapshots are; None: from the environment.
    # scripts/store_parts.py sets it to stand many nodes up on one machine.
    snapshot_node = None

    def read(self, url: str, arch: str, kernel: str) -> tuple[dict | None, list[str]]:
        """``kernel``'s part of the arch's table: once per job, node and kernel where torchrun says
        the job (``core.store_snapshot``), else from the store."""
        from ...core import store_snapshot  # here, not at start-up: only a process given a store URL reads one

        # A store down for this process still goes through the snapshot: its "none" is the node's view.
        read = lambda: self.read_server(url, arch, kernel)  # noqa: E731
        return store_snapshot.read(url, arch, read, 2 * TIMEOUT_S + 1, self.snapshot_node, lambda: self.why.get(url),
                                   kernel=kernel)

    def read_server(self, url: str, arch: str, kernel: str) -> tuple[dict | None, list[str]]:
        if url in self.down:
            return None, []
        store, notes = self.store(url), []
        try:
            document, older = store.read_kernel(arch, kernel, notes)
            if older:  # the older hash's entries first: the add script counts them as written first
                combined = new_document(arch, store.shown)
                merge(combined, self._older(store, url, arch, notes), kernel)
                document = merge(combined, document)
            return document, notes
        except StoreNoPermission as exc:
            return None, [f"skipping table store {hide_password(url)} for arch {arch}: "
                          f"{store.grant(exc, READ_GRANTS)}; keys it would have given are chosen by "
                          "the local rules (other tables, AUTOTUNE_ON_MISS, or consensus tuning)"]
        except StoreRefused as exc:  # up, but its keys for this arch are not ours to read (WRONGTYPE)
            keys = " and ".join(store.key(arch, part) for part in (f"kernel:{kernel}", "provenance"))
            return None, [f"skipping table store {hide_password(url)} for arch {arch}: the server refused to read "
                          f"{keys} ({exc}); they must be hashes of autotune_guard entries"]
        except StoreDown as exc:
            self.went_down(url, exc)
            return None, []

    def _older(self, store: Store, url: str, arch: str, notes: list) -> dict:
        """The arch's table in the layout before per-kernel keys, read whole once (said once: it
        costs every process a read of the whole arch, and one command moves it)."""
        if (url, arch) not in self.older:
            self.older[url, arch] = store.read_older(arch, notes)
            count = sum(len(entries) for entries in self.older[url, arch]["kernels"].values())
            current().warn_once(f"table store older layout {url} {arch}", (
                f"table store {store.shown} holds arch {arch}'s entries in one hash ({store.key(arch, 'entries')}, "
                f"the layout before per-kernel keys): this process read all {count} of them to find its kernels; "
                f"python -m autotune_guard.report store-upgrade {store.shown} moves them to per-kernel keys"),
                scope="process")
        return self.older[url, arch]

    def went_down(self, url: str, exc) -> None:
        """Said once per URL: what was chosen stays chosen; what it would have given is not had."""
        self.down.add(url)
        shown = hide_password(url)
        self.why[url] = f"it stopped answering: {exc}"
        current().warn_once(f"table store down {url}", (
            f"table store {shown} stopped answering ({exc}): choices made so far stand; keys it would have "
            "given are chosen by the local rules (other tables, AUTOTUNE_ON_MISS, or consensus tuning), and "
            "winners tuned from now on are not added to it"), scope="process")

    def add_kernel(self, url: str, arch: str, kernel: str, live, entries: dict):
        """(status, found, what differs) of ``Store.add``; a provenance that differs only where it
        does not matter (a Triton version of its own) is added anyway. None when the store is down
        or refused this user a write (said once: it may still read)."""
        if url in self.no_write:
            return None
        try:
            store = self.store(url)
            status, found = store.add(arch, kernel, live, entries)
            differs = kernel_version_differs(found, live) if status == "provenance" else []
            if status == "provenance" and not differs and isinstance(found, dict):
                status, found = store.add(arch, kernel, live, entries, mode="same")
        except StoreNoPermission as exc:
            self.no_write.add(url)
            current().warn_once(f"table store no write {url}", (
                f"table store {hide_password(url)} may be read but not added to: "
                f"{self.store(url).grant(exc, WRITE_GRANTS)}; winners this job tunes stay chosen here and in "
                "its evidence files, and are not added to it"), scope="process")
            return None
        except StoreDown as exc:
            self.went_down(url, exc)
            return None
        return status, found, differs

    def after_fork(self) -> None:
        self.stores = {}  # a client's sockets are the parent's


def stores() -> Stores:
    return current().held("table_stores", Stores)


def configure(guard, policy) -> None:
    """At install: the reader is registered, and each store URL must answer now, else the install
    fails naming it, or with AUTOTUNE_TABLE_STORE_DOWN=local the store is left out, said once."""
    urls = store_urls(policy.table_path) if policy is not None else []
    if not urls:
        return
    held = stores()
    guard.facts.provide("table_store", lambda: held)
    for url in urls:
        held.down.discard(url)
        try:
            held.store(url).ping()
        except StoreDown as exc:
            if policy.table_store_down != "local":
                raise PolicyError(f"AUTOTUNE_TABLE_PATH: the table store {hide_password(url)} does not answer "
                                  f"({exc}); start it or fix the URL, or set AUTOTUNE_TABLE_STORE_DOWN=local to run "
                                  "by the local rules without it (allowed: error, local)") from None
            held.down.add(url)
            held.why[url] = f"it did not answer at start: {exc}"
            guard.warn_once(f"table store down at start {url}", (
                f"table store {hide_password(url)} does not answer ({exc}); AUTOTUNE_TABLE_STORE_DOWN=local: this "
                "process runs by the local rules (other tables, AUTOTUNE_ON_MISS, consensus tuning) without it"),
                scope="process")


def kernel_version_differs(stored, live) -> list[str]:
    if not isinstance(stored, dict) or not isinstance(live, dict):
        return []
    return provenance_differences(stored, live)
