"""Helion (``@helion.kernel``), governed: its ``BoundKernel.autotune`` is the seam.

Helion binds a kernel to its arguments' specialization (dtypes, shapes, ``hl.specialize`` values)
as a ``BoundKernel``. At its first call with no config set, ``ensure_config_exists`` calls the
bound kernel's ``autotune``, which searches: a finite search over the kernel's ``configs=[...]``,
else Helion's full search (minutes a kernel), answered by Helion's own config cache where it can.
The guard replaces ``autotune`` (one patch, undone with the rest), and the engine decides:

* pinned, a consensus followed, a table's entry: the chosen config is set (``set_config``):
  nothing searched, Helion's own cache not read;
* auto: Helion's own autotune, its cache included; record and the consensus claimer: Helion's own
  search with its cache unread (a decision for others is measured here); the winner is noted.

Candidates: the kernel's ``configs`` (two or more). A full search has no list: its candidates are
the table's config for the key, where there is one, and Helion's default config (the pinned
rule's pick on a miss); it is an open search: under consensus the claimer's search finds the job's
config, published with its winner, and every other rank adopts it (``deciding.Tunable.adopt``).
A kernel Helion searches across ranks (``_collective``: under torch 2.11, every kernel of a job) is
searched by every rank together before the claim, and the consensus agrees that search's result.
``HELION_ASSERT_CACHE_HIT=1`` (nothing may be searched) is honoured: a key the guard would have
Helion search for a decision is refused, naming it; a key decided from the table is a hit.
A bound kernel keeps its config for its life (as Helion keeps it): a later policy does not re-decide it.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import threading

from .. import deciding
from ..core.errors import ConsensusError, FileFormatError, SelectionError
from ..core.schema import TABLE_FORMAT, read_document
from ..core.store_url import hide_password, is_store_url
from ..core.tables import table_candidates
from ..core.model import ChoiceKey, base_name, key_text, provenance, qualified_name, signature
from ..deciding import families as registered
from ..runtime import current
from .. import _patching

MODULE = "helion.runtime.kernel"
ASSERT_HIT = "HELION_ASSERT_CACHE_HIT"
HELD = "Helion family"


class HelionState:
    """The process's Helion state, held by the Guard: one lock for first launches (Helion's own
    search is not made for two at once)."""

    def __init__(self):
        self.lock = threading.RLock()

    def after_fork(self) -> None:
        self.lock = threading.RLock()


class HelionFamily(registered.Family):
    name = "Helion"
    recognises = "module"
    module = MODULE

    def install(self, module) -> None:
        """Replace ``BoundKernel.autotune`` (the patching idiom: undone by ``uninstall``)."""
        bound_kernel = module.BoundKernel
        if _patching.patched(bound_kernel, "autotune") is not None:
            return

        def autotune(self, args, *, force=True, **kwargs):  # Helion's name: bound methods pickle by it
            own = _patching.original(bound_kernel, "autotune")
            return governed(self, own, args, force, kwargs)

        _patching.patch(bound_kernel, "autotune", autotune)


def governed(bound, own, args, force: bool, kwargs: dict):
    """One bound kernel's search, under the policy in force; returns the config set on it."""
    guard = current()
    epoch = guard.epoch
    if epoch.installed is None:
        return own(bound, args, force=force, **kwargs)
    qualified = qualified_name(bound.kernel.fn)
    if epoch.policy.mode == "off" or not epoch.policy.in_scope(base_name(qualified)):
        return own(bound, args, force=force, **kwargs)
    listed = [] if force else list(bound.kernel.configs or ())
    if len(listed) == 1:
        return own(bound, args, force=force, **kwargs)  # one config: nothing to choose
    guard.launched(epoch, qualified, ())
    key = ChoiceKey(guard.facts.get("arch"), qualified, key_text(_key_parts(bound.kernel, args)))
    live = listed or _full_candidates(guard, epoch, bound, key)
    tunable = HelionKey(epoch, bound, own, args, force, kwargs, key, live, full=not listed)

    def apply(index, tuned):
        if index is not None and (tunable.chosen is None or signature(_descriptor(tunable.chosen))
                                  != signature(tunable.descriptors[index])):
            bound.set_config(tunable.live[index])
            tunable.chosen = tunable.live[index]
        return lambda: tunable.chosen if tunable.chosen is not None else bound._config

    def pending():
        if epoch.policy.mode == "consensus" and _collective(bound) and deciding.table_index(epoch, tunable) is None:
            tunable.search_together(guard)  # every rank, before the engine picks one to search
        return tunable

    return deciding.first_launch(epoch, pending, apply, lambda: governed(bound, own, args, force, kwargs),
                                 gate=guard.held(HELD, HelionState).lock)


def _collective(bound) -> bool:
    """Whether Helion searches ``bound`` across ranks: it counts the kernel as distributed (the kernel
    takes a process group, or this torch cannot tell a symmetric-memory tensor, as torch 2.11 cannot,
    with a process group initialized), and its searches then gather and broadcast timings over that
    group. No rank can search such a kernel alone: the others must be searching too."""
    return getattr(getattr(bound, "env", None), "process_group_name", None) is not None


def _key_parts(kernel, args) -> list:
    """Helion's specialization of ``args`` (what it binds a kernel by), readable: a tensor as its
    dtype and shape (``torch.float32[1000]``), anything else as Helion gives it."""
    parts = []
    for part in kernel.specialization_key(tuple(args)):
        if isinstance(part, tuple) and len(part) >= 2 and type(part[0]).__name__ == "dtype":
            parts.append(f"{part[0]}{list(part[1])}")
        else:
            parts.append(part)
    return parts


def _full_candidates(guard, epoch, bound, key: ChoiceKey) -> list:
    """A full search's candidates: the table's config for the key (where there is one) and
    Helion's default config."""
    from helion import Config

    found = []
    entry = guard.table_entry(epoch, key.arch, key.kernel, key.key)
    if isinstance(entry, dict) and isinstance(entry.get("kwargs"), dict):
        config = _checked(guard, epoch, bound, key, entry["kwargs"])
        if config is not None:
            found.append(config)
    default = bound.config_spec.default_config()
    if not found or signature(_descriptor(found[0])) != signature(_descriptor(default)):
        found.append(default)
    return found


def _checked(guard, epoch, bound, key: ChoiceKey, kwargs: dict):
    """The table's config for ``key`` as Helion's own config validation accepts it; None, named
    once, when it does not (a bad entry handed over would end the program at the kernel's first
    call). Under AUTOTUNE_ON_MISS=error a table-deciding mode refuses it, naming it."""
    from helion import Config
    from helion.exc import BaseError

    try:
        bound.config_spec.normalize(Config(**copy.deepcopy(kwargs)))  # validates a copy: the entry stays as written
        return Config(**kwargs)
    except (BaseError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:  # InvalidConfig mostly
        why = " ".join(str(exc).split()) or type(exc).__name__
    where = _entry_source(epoch.policy.table_path, key.arch, key.kernel, key.key)
    shown = ", ".join(f"{name}={value!r}" for name, value in kwargs.items())[:200]
    said = f"Helion {key.what()}: the table entry in {where} ({shown}) cannot be used: Helion says {why}"
    policy = epoch.policy
    if policy.on_miss == "error" and policy.mode in ("pinned", "consensus"):
        if key not in epoch.refused:
            epoch.refused.append(key)
        raise SelectionError(f"autotune_guard: {said}; AUTOTUNE_ON_MISS=error refuses it: fix or remove the entry",
                             kernel=key.kernel, key=key.key, arch=key.arch)
    guard.warn_once(f"helion unusable entry {key.text()}", f"{said}; it is not used (the kernel falls back as "
                    "on a table miss)")
    return None


def _entry_source(table_path, arch: str, kernel: str, key: str) -> str:
    """The table file (or the table stores before it) that holds ``kernel``'s entry for ``key``,
    as the tables are merged: earlier files win. Read again only for a bad entry's message."""
    stores = []
    for path in table_candidates(table_path, arch):
        if is_store_url(path):
            stores.append(f"table store {hide_password(path)}")
            continue
        try:
            kernels = read_document(path, formats=(TABLE_FORMAT,))["kernels"]
        except FileFormatError:
            continue
        if any(key in (kernels.get(name) or {}) or "*" in (kernels.get(name) or {})
               for name in (kernel, kernel.rpartition(".")[2])):
            return " or ".join([*stores, path])
    return " or ".join(stores) or "the tables (AUTOTUNE_TABLE_PATH)"


def _descriptor(config) -> dict:
    """A Helion Config as plain data: its fields are the descriptor's ``kwargs``."""
    return {"kwargs": dict(config)}


class HelionKey(deciding.Tunable):
    """One bound kernel's pending choice."""

    noun = "Helion configs"
    uses_config_defaults = False  # a Helion Config has no Triton fields to default

    def __init__(self, epoch, bound, own, args, force, kwargs, key, live, full: bool):
        self.epoch, self.bound, self.own, self.args, self.force, self.kwargs = epoch, bound, own, args, force, kwargs
        self.key, self.live, self.full = key, list(live), full
        self.open_search = full  # a full search finds configs outside its candidates
        self.descriptors = [_descriptor(c) for c in live]
        self.chosen = None  # the config set on the bound kernel here
        self.together = None  # Helion's collective search's result, found on every rank (search_together)

    def every(self):
        """The candidates, and (a full search) the config its search found, which a record must name
        among them for ``report merge`` to keep it."""
        found = list(self.descriptors)
        if self.chosen is not None and _descriptor(self.chosen) not in found:
            found.append(_descriptor(self.chosen))
        return found

    def config_of(self, signature_text: str) -> dict | None:
        if self.chosen is not None and signature(_descriptor(self.chosen)) == signature_text:
            return _descriptor(self.chosen)
        return super().config_of(signature_text)

    def adopt(self, config: dict, signature_text: str) -> int:
        """The job's config, found by the claimer's search: a candidate here (checked: its fields
        must give the signature the claimer published)."""
        from helion import Config

        kwargs = config.get("kwargs")
        if not isinstance(kwargs, dict) or signature({"kwargs": kwargs}) != signature_text:
            raise ConsensusError(f"autotune_guard consensus: Helion kernel {self.key.what()}: the claimer published "
                                 f"a config that is not its winner {signature_text} ({str(config)[:200]})")
        self.live.append(Config(**kwargs))
        self.descriptors.append({"kwargs": dict(kwargs)})
        return len(self.live) - 1

    def provenance(self) -> dict:
        facts = current().facts
        try:
            source = inspect.getsource(self.bound.kernel.fn)
        except (OSError, TypeError):
            source = ""
        options = {"full_search": self.full, "static_shapes": getattr(self.bound.settings, "static_shapes", None)}
        every = [] if self.full else self.descriptors  # a full search's candidates are not the kernel's
        # Helion compiles Triton kernels: the process's FP fusion (the Triton adapter's fact) decides their bits too
        return provenance(source, every, options, facts.get("triton_version"), facts.get("arch"), facts.ask("numerics"))

    def check_provenance(self) -> None:
        deciding.check_table_provenance(self.epoch, self.key, self.provenance)

    def search_together(self, guard) -> None:
        """A collective search (``_collective``) under consensus: every rank takes part in Helion's one
        search, whose timings its rank 0 broadcasts; the claimer's ``tune`` is then its result, and
        the consensus agrees it as for any key (the others follow it)."""
        guard.warn_once(f"helion collective {self.key.kernel}", (
            f"Helion {self.key.what()}: Helion searches it across the job's ranks together (it counts the "
            "kernel as distributed), so every rank takes part in that one search, not the claimer alone; the "
            "consensus agrees its result and the table answers later runs"), logging.INFO,
            name="helion-collective-search")
        self.together = self.tune("consensus")

    def tune(self, how: str) -> deciding.Tuned:
        """Helion's own search, here: in auto its config cache may answer; a decision for others
        (record, the claimer) reads no cache. After ``search_together``, its result, not searched again."""
        if self.together is not None:
            found, self.together = self.together, None
            return found
        mode = self.epoch.policy.mode
        if os.environ.get(ASSERT_HIT) == "1" and mode != "auto":
            raise SelectionError(
                f"autotune_guard: Helion kernel {self.key.what()}: {ASSERT_HIT}=1 says nothing may be searched, and "
                f"{mode} mode would have Helion search it here (no table entry decides it); pin it from a table "
                f"(AUTOTUNE_MODE=pinned), or unset {ASSERT_HIT}", kernel=self.key.kernel, key=self.key.key,
                arch=self.key.arch)
        from helion._utils import counters

        hits = counters["autotune"]["cache_hit"]
        force = self.force or (mode != "auto" and self.full)
        config = self.own(self.bound, self.args, force=force, **self.kwargs)
        self.chosen = config
        said = "cache hit" if counters["autotune"]["cache_hit"] > hits else None
        return deciding.Tuned(_descriptor(config), config, None, None, said, launched=False)


registered.register(HelionFamily())
