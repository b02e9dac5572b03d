"""The process's table stores (held on the Guard): the reader ``core.tables.load_tables`` gets
through the ``table_store`` fact, one kernel at a time, and the writer ``evidence.store_growth``
calls through it (``grow_kernel``: ``core.table_writes.grow_table``, the one rule of every table
write, made to a kernel's part in one transaction); what a store down, or refusing this user, means
for the job is said here once. An entry a store holds under a bare kernel name (no module part, as
``report import`` and older tables write it) that a qualified kernel would use is named, or refused
with AUTOTUNE_ON_MISS=error (``bare_name_note``, asked by the decision engine)."""

from __future__ import annotations

from ...core import table_writes, tables
from ...core.errors import PolicyError
from ...core.model import base_name, signature, tuned_winner
from ...core.store_url import hide_password, store_urls
from ...core.store_values import merge, new_document
from ...runtime import current
from .client import READ_GRANTS, TIMEOUT_S, WRITE_GRANTS, Store
from .errors import StoreBusy, StoreDown, StoreNoPermission, StoreRefused, StoreTooBig
from .parts import two_ways, two_ways_note


class Stores:
    """Each URL's client, and what this process knows of each store (down, refused a write, older layout)."""

    def __init__(self):
        self.stores: dict[str, Store] = {}
        self.down: set[str] = set()  # URLs said to be down: not asked again by this process
        self.why: dict[str, str] = {}  # URL -> what it met when it went down (the node's others say it)
        self.no_write: set[str] = set()  # URLs whose user the server refused a write: not asked to add again
        self.older: dict = {}  # (URL, arch) -> the arch's table in the older layout, read whole once
        self.bare: dict = {}  # (arch, bare kernel name) -> {URL: the keys that store gave under it}

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
        document, notes = store_snapshot.read(url, arch, read, 2 * TIMEOUT_S + 1, self.snapshot_node,
                                              lambda: self.why.get(url), kernel=kernel)
        if "." not in kernel:  # a bare name: what this store gives under it, for bare_name_note
            given = set(document["kernels"].get(kernel) or ()) if document is not None else set()
            self.bare.setdefault((arch, kernel), {})[url] = given
        return document, notes

    def bare_name_note(self, epoch, key) -> str | None:
        """The line naming a store's entry under a bare kernel name that ``key``'s qualified kernel
        uses (its table has no entry under the qualified name): that entry was written for any
        kernel of that name, and nothing says it is this one's. None where the entry is not such."""
        bare = base_name(key.kernel).rpartition(".")[2]
        given = self.bare.get((key.arch, bare)) if bare != key.kernel else None
        loaded = epoch.tables.get(key.arch) if given else None
        if not given or loaded is None:
            return None
        for name in dict.fromkeys((key.kernel, base_name(key.kernel))):
            if tables.table_entry({name: dict.get(loaded, name)}, name, key.key) is not None:
                return None  # the qualified name's own entry is used
        path = epoch.policy.table_path or ()  # a store of this policy's (a fact outlives the policy that set it)
        url = next((url for url, keys in given.items() if (key.key in keys or "*" in keys) and url in path), None)
        if url is None:
            return None
        return (f"kernel {key.kernel}: table store {hide_password(url)} has its entry only under the bare name {bare} "
                f"(no module: written by report import or an older table), which any kernel named {bare} would "
                f"use, unchecked; store it under {key.kernel} (report store-export, rename, store-import) to use it "
                "without this word")

    def read_server(self, url: str, arch: str, kernel: str) -> tuple[dict | None, list[str]]:
        if url in self.down:
            return None, []
        store, notes = self.store(url), []
        try:
            document, older = store.read_kernel(arch, kernel, notes)
            if older:  # the older hash's entries first: the one rule across the layouts (upgrade.py)
                combined, held = new_document(arch, store.shown), self._older(store, url, arch, notes)
                found = two_ways(held, document, kernel)
                if found:
                    notes.append(two_ways_note(store.shown, store.key(arch, f"kernel:{kernel}"), kernel, found))
                merge(combined, held, kernel)
                document = merge(combined, document)
            return document, notes
        except StoreTooBig as exc:  # up: that key is left out, the rest of the store is used
            return None, [f"skipping table store {hide_password(url)} for kernel {kernel} of arch {arch}: {exc}; its "
                          "keys are chosen by the local rules (other tables, AUTOTUNE_ON_MISS, or consensus tuning)"]
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
            try:
                self.older[url, arch] = store.read_older(arch, notes)
            except StoreTooBig as exc:  # once: the per-kernel hashes are still used
                notes.append(f"skipping table store {store.shown} for arch {arch}: {exc}")
                self.older[url, arch] = new_document(arch, store.shown)
                return self.older[url, arch]
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

    def grow_kernel(self, url: str, arch: str, kernel: str, additions: dict, author: dict, defaults: dict,
                    live=None):
        """``core.table_writes.grow_table`` made to ``kernel``'s part of the store's table (``additions``:
        key -> ``model.TunedWinner``; ``author``: who adds them; ``live``: the kernel's provenance),
        atomically against other writers: its ``Grown``. An entry the arch's older one-hash layout
        holds is kept (said as differing where it does). None where the store is down, refused this
        user a write (said once: it may still read), or met other writers at every try (said once); a
        kernel whose hash is too big to read gets nothing added, said once, and the others go on."""
        if url in self.no_write:
            return None
        store = self.store(url)
        try:
            return store.update_kernel(arch, kernel, lambda part: self._grown(
                store, url, part, (arch, kernel, additions, author, defaults, live)), superseded=False)
        except StoreNoPermission as exc:
            self.no_write.add(url)
            current().warn_once(f"table store no write {url}", (
                f"table store {hide_password(url)} may be read but not added to: "
                f"{store.grant(exc, WRITE_GRANTS)}; winners this job tunes stay chosen here and in "
                "its evidence files, and are not added to it"), scope="process")
        except StoreTooBig as exc:  # up: this kernel's winners are not added (nothing to try again), the rest are
            current().warn_once(f"table store too big {url} {kernel}", (
                f"{exc}: this job's winners for kernel {kernel} stay chosen here and in its evidence files, and are "
                "not added to it"), scope="process")
            return table_writes.Grown(new_document(arch, store.shown), [], 0, [], [], [])
        except StoreBusy as exc:
            current().warn_once(f"table store busy {url}", (
                f"table store {hide_password(url)}: {exc}: this job's winners for it are not added now; "
                "they are tried again at exit"), scope="process")
        except StoreDown as exc:
            self.went_down(url, exc)
        return None

    def _grown(self, store: Store, url: str, part, write: tuple):
        """(the part to write, its Grown) of one try: ``write`` is (arch, kernel, additions, author,
        defaults, live)."""
        arch, kernel, additions, author, defaults, live = write
        if part.unreadable_provenance(kernel):  # said by the read; nothing is added beside it
            found = table_writes.Grown(part.document, [], 0, [(kernel, ["its provenance there is unreadable"],
                                                               len(additions))], [], [])
            return None, found
        older = self._older(store, url, arch, []) if part.older else new_document(arch, store.shown)
        combined = merge(merge(new_document(arch, store.shown), older, kernel), part.document)
        part.document.update(combined)  # as a job reads it: the older layout's entries were written first, and stay
        older = older["kernels"].get(kernel, {})
        mine = {key: desc for key, desc in additions.items() if key not in older}
        found = table_writes.grow_table(part.document, arch, {kernel: mine} if mine else {}, author, defaults,
                                        {kernel: live} if live else None)
        held = [(kernel, key, older[key]) for key, desc in sorted(additions.items())
                if key in older and signature({"kwargs": {}, **older[key]}) != signature(desc)]
        return found.document, found._replace(differing=found.differing + held)

    def add_kernel(self, url: str, arch: str, kernel: str, live, entries: dict):
        """The add before issue 57 (``scripts/store_parts.py`` calls it): ``entries`` (key -> (config,
        who added it)) written by ``grow_kernel``; (status, [(key, kept entry)], what differs) or None."""
        who = next(iter(entries.values()))[1] if entries else {}
        found = self.grow_kernel(url, arch, kernel, {key: tuned_winner(desc) for key, (desc, _) in entries.items()},
                                 who, {}, live)
        if found is None:
            return None
        if found.stale:
            return "provenance", None, found.stale[0][1]
        return "ok", [(key, kept) for _, key, kept in found.differing], []

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
