"""max-autotune's template selection under the policy: Inductor's ``AlgorithmSelectorCache``
(``torch._inductor.select_algorithm``), which times GEMM/conv templates against aten while
compiling.

The seam, the same in torch 2.11 and 2.13: ``AlgorithmSelectorCache.__call__(name, choices,
input_nodes, layout, ...)`` returns at once, timing nothing, when it is offered one choice. So:

* pinned: the table's entry (else ``AUTOTUNE_ON_MISS``: ``error`` refuses, otherwise Inductor's
  deterministic choice, aten where offered, named once) is the only choice passed on: 0 benchmarks;
* record: Inductor times as usual, deciding in the lowering (not deferred to benchmark fusion) and
  with its autotune caches off, so the winner recorded, with every choice's timing, is the one a
  pinned process runs; ``do_autotuning`` is wrapped to read the timings;
* consensus: one rank times (as record), the others pass on its winner (``deciding.consensus.decide``);
* auto: Inductor selects as it would; the choice is logged (``cache hit`` when its cache answered).

Inductor's FX graph and AOTAutograd caches would serve a compiled graph, template choices and all,
without any selection: a max-autotune compile's cache key gets the pinned rule's fingerprint
(mode, on-miss rule, the tables' contents) in pinned mode, and bypasses those caches otherwise
(``template_cache``). Names and keys are ``template_choices``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import sys
import threading

from ...core import consensus
from ...deciding import consensus as engine
from ...core.errors import SelectionError
from ...core.model import Choice, ChoiceKey, record_entry, signature
from ...core.tables import table_index
from ...runtime import current
from .. import _patching
from . import template_choices as tc

logger = logging.getLogger("autotune_guard")


class _Seam:
    call_signature = None  # of Inductor's own __call__, once patched
    tuning_signature = None  # of its do_autotuning
    governed = False  # the selection seam is in force in this process
    tried = False  # the seam was looked for, in the whole module


SEAM = _Seam()
_local = threading.local()  # .active: the selection this thread decides now; .timings: what Inductor measured
_pending: dict = {}  # (op, inputs key) -> (Selection, epoch): a choice Inductor deferred to its scheduler (auto)


class Selection:
    """One selection as the guard sees it: its ChoiceKey, the choices offered (after Inductor's
    own preprocessing) and their descriptors, and which of them are extern (aten)."""

    __slots__ = ("key", "offered", "descs", "externs")

    def __init__(self, key, offered, descs, externs):
        self.key, self.offered, self.descs, self.externs = key, offered, descs, externs

    def index_of(self, choice):
        return next((i for i, c in enumerate(self.offered) if c is choice), None)

    def measured(self, timings) -> dict | None:
        """Inductor's timings by signature (a failed choice's inf as null)."""
        if not timings:
            return None
        found = {}
        for choice, value in timings.items():
            i = self.index_of(choice)
            if i is not None:
                value = float(value)
                found[signature(self.descs[i])] = [value if math.isfinite(value) else None]
        return found


SELECTOR_MODULE = "torch._inductor.select_algorithm"
# Modules that finish importing after the selector module has (they import it): its post-import hook
# can fire while it is still half-imported (it imports Inductor's runtime, whose hook registers this one).
AFTER_SELECTOR = (SELECTOR_MODULE, "torch._inductor.kernel.mm", "torch._inductor.lowering", "torch._inductor.graph")


def on_import(_module=None) -> None:
    """Post-import hook of the modules of ``AFTER_SELECTOR``: patch the selector once it is whole."""
    module = sys.modules.get(SELECTOR_MODULE)
    if module is None or SEAM.tried or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return
    SEAM.tried = True
    patch_selection(module)


def patch_selection(module) -> list:
    """Post-import hook of ``torch._inductor.select_algorithm``: the guard's ``__call__`` and
    ``do_autotuning`` on ``AlgorithmSelectorCache``; a torch without that seam keeps the naming at
    the timer (``adapters.triton.foreign``)."""
    cls = getattr(module, "AlgorithmSelectorCache", None)
    own = getattr(cls, "__call__", None)
    tuning = getattr(cls, "do_autotuning", None)
    if cls is None or not callable(tuning) or not callable(getattr(module, "create_inputs_key", None)) \
            or not _takes(own, ("name", "choices", "input_nodes", "layout")) \
            or not _takes(tuning, ("name", "inputs_key", "choices")):
        current().warn_once("no template seam", "torch.compile max-autotune: this torch's template selection "
                            "(select_algorithm.AlgorithmSelectorCache) has no seam autotune_guard knows; each "
                            "selection is named as not governed when it times its choices", logging.INFO, scope="process")
        return []
    SEAM.call_signature, SEAM.tuning_signature = inspect.signature(own), inspect.signature(tuning)
    patches = [_patching.patch(cls, "__call__", _call_of(cls)), _patching.patch(cls, "do_autotuning", _tuning_of(cls))]
    SEAM.governed = True
    return patches


def _takes(function, names) -> bool:
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return False
    return all(name in parameters for name in names)


def governed() -> bool:
    return SEAM.governed


def timing_now() -> bool:
    """Whether this thread is inside a selection the guard governs while Inductor times its choices
    (a candidate's own tuning then is part of that timing, not a choice of its own)."""
    return getattr(_local, "active", None) is not None


def _call_of(cls):
    def __call__(self, name, choices, input_nodes, layout, *args, **kwargs):
        own = _patching.original(cls, "__call__")
        return select(self, own, (name, choices, input_nodes, layout), args, kwargs)

    return __call__


def _tuning_of(cls):
    def do_autotuning(self, *args, **kwargs):
        timings = _patching.original(cls, "do_autotuning")(self, *args, **kwargs)
        if isinstance(timings, dict):
            if getattr(_local, "active", None) is not None:
                _local.timings = timings
            else:
                bound = SEAM.tuning_signature.bind(self, *args, **kwargs).arguments
                _deferred(bound.get("name"), bound.get("inputs_key"), timings)
        return timings

    return do_autotuning


def select(self, own, call, args, kwargs):
    """One selection under the current epoch; ``own`` is Inductor's ``__call__``."""
    name, choices, input_nodes, layout = call
    guard = current()
    epoch = guard.epoch
    if epoch.installed is None:
        return own(self, *call, *args, **kwargs)
    policy = epoch.policy
    kernel = tc.kernel_name(str(name))
    if not policy.in_scope(kernel):
        return own(self, *call, *args, **kwargs)
    offered = list(choices)
    for preprocess in list(getattr(self, "preprocessing_fns", ())):  # Inductor's own filters, as it runs them
        offered = list(preprocess(offered))
    call = (name, offered, input_nodes, layout)
    if len(offered) < 2:  # nothing to choose: Inductor's own path (and its error for none)
        return own(self, *call, *args, **kwargs)
    selection = _describe(kernel, offered, input_nodes, layout)
    guard.launched(epoch, kernel, ())
    if policy.enumerate:
        logger.info("torch.compile template selection %s: %d choices, %s", selection.key.what(), len(offered),
                    policy.mode)
    if policy.mode == "pinned":
        return _run_one(self, own, call, _pin(selection, epoch), args, kwargs)
    if policy.mode == "consensus":
        return _consensus(self, own, selection, epoch, call, args, kwargs)
    return _timed(self, own, selection, epoch, call, args, kwargs, "timed")[0]


def _describe(kernel: str, offered, input_nodes, layout) -> Selection:
    from torch._inductor import select_algorithm as inductor

    externs = [isinstance(c, inductor.ExternKernelCaller) for c in offered]
    texts = [tc.choice_text(str(getattr(c, "name", "?")), str(getattr(c, "description", "") or ""), extern)
             for c, extern in zip(offered, externs)]
    device = getattr(getattr(layout, "device", None), "type", "?")
    key = ChoiceKey(tc.arch_of(device, current().facts.get("arch") if device == "cuda" else None), kernel,
                    inductor.create_inputs_key(input_nodes))
    return Selection(key, offered, tc.descriptors(texts), externs)


def _pin(selection: Selection, epoch) -> int:
    guard = current()
    key = selection.key
    entry = guard.table_entry(epoch, key.arch, key.kernel, key.key)
    rank = (guard.facts.get("rank_world") or (0, 1))[0] if epoch.policy.chaos else 0
    index, why = tc.pinned_index(key, selection.descs, selection.externs, entry, epoch.policy, rank)
    chosen = signature(selection.descs[index])
    if why not in ("table", "chaos"):
        guard.warn_once(f"template miss {key.text()}", f"torch.compile template selection {key.what()}: {why}, "
                        f"{chosen}, untimed; record and merge a table to pin a timed winner")
    guard.note(epoch, key, Choice(chosen, "pinned"))
    logger.debug("pinned (template selection) %s -> %s (%s)", key.what(), chosen, why)
    return index


def _run_one(self, own, call, index: int, args, kwargs):
    """Inductor's own selection, offered the one chosen choice: it returns at once, timing nothing."""
    name, offered, input_nodes, layout = call
    return own(self, name, [offered[index]], input_nodes, layout, *args, **kwargs)


def _timed(self, own, selection: Selection, epoch, call, args, kwargs, how: str, for_job: bool = False):
    """Inductor selects; (what it returns to its caller, the index chosen or None). Outside auto it
    decides here, not deferred, with its autotune caches off; the choice is noted with its timings."""
    deciding = epoch.policy.mode != "auto"
    bound = SEAM.call_signature.bind(self, *call, *args, **kwargs)
    parameters = SEAM.call_signature.parameters
    asked = bool(bound.arguments.get("return_choice", False))
    if "return_choice" in parameters:  # torch 2.11: the choice comes back only when asked for
        bound.arguments["return_choice"] = True
    if deciding and "return_multi_template" in parameters:
        bound.arguments["return_multi_template"] = False
    before = _benchmarks()
    _local.active, _local.timings = selection.key, None
    try:
        with _caches_off(deciding):
            result = own(*bound.args, **bound.kwargs)
        timings = _local.timings
    finally:
        _local.active = _local.timings = None
    returned, chosen = result, None
    if isinstance(result, tuple) and len(result) == 2:
        chosen = result[1]
        if "return_choice" in parameters and not asked:
            returned = result[0]
    index = selection.index_of(chosen) if chosen is not None else _unseen(self, selection, epoch)
    if index is None:
        return returned, None
    winner = selection.descs[index]
    if _benchmarks() == before:  # nothing timed here: Inductor's autotune cache answered, or its own rule
        how = "cache hit" if timings else "library"
    record = _record(selection, epoch, index, how, timings)
    if for_job and epoch.policy.table_path:
        current().tuned_for_job(epoch, selection.key, winner)
    current().note(epoch, selection.key, Choice(signature(winner), how), record)
    return returned, index


def _unseen(self, selection: Selection, epoch):
    """The choice Inductor made without returning it: its deterministic pick (``config.deterministic``);
    else (auto) deferred to its scheduler, noted when that times it (``_deferred``)."""
    from torch._inductor import config

    if getattr(config, "deterministic", False) and callable(getattr(self, "pick_deterministic_choice", None)):
        return selection.index_of(self.pick_deterministic_choice(selection.offered))
    if epoch.policy.mode == "auto":
        _pending[(selection.key.kernel, selection.key.key)] = (selection, epoch)
        return None
    raise SelectionError(f"autotune_guard: {selection.key.what()}: Inductor did not say which choice it selected, so "
                         f"{epoch.policy.mode} mode cannot note it; this torch's select_algorithm is not one the guard knows")


def _deferred(name, inputs_key, timings) -> None:
    """Timings of a selection Inductor deferred to its scheduler (benchmark fusion, auto mode): the
    fastest is noted as timed (the scheduler may still prefer another once it fuses an epilogue)."""
    found = _pending.pop((tc.kernel_name(str(name)), inputs_key), None)
    if found is None:
        return
    selection, epoch = found
    finite = {c: t for c, t in timings.items() if math.isfinite(float(t)) and selection.index_of(c) is not None}
    if not finite:
        return
    index = selection.index_of(min(finite, key=finite.__getitem__))
    current().note(epoch, selection.key, Choice(signature(selection.descs[index]), "timed"),
                   _record(selection, epoch, index, "timed", timings))


def _record(selection: Selection, epoch, index: int, how: str, timings):
    if not epoch.policy.record_path:
        return None
    desc = selection.descs[index]
    return record_entry(desc, signature(desc), how, selection.measured(timings), selection.descs)


def _benchmarks() -> int:
    """Inductor's count of template benchmark passes in this process."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["select_algorithm_autotune"])


def _caches_off(deciding: bool):
    """Inductor's local and remote autotune caches off: a record or a job's decision needs timings."""
    if not deciding:
        return contextlib.nullcontext()
    from torch._inductor import config

    return config.patch({name: False for name in ("autotune_local_cache", "autotune_remote_cache")
                         if hasattr(config, name)})


def _consensus(self, own, selection: Selection, epoch, call, args, kwargs):
    """One rank of the job times the selection and publishes the winner; the others pass it on alone.
    A table in AUTOTUNE_TABLE_PATH decides where it has the key."""
    guard = current()
    key = selection.key
    table = _table_index(selection, epoch)
    store = guard.job_store(key)
    if store is None:
        if table is not None:
            guard.note(epoch, key, Choice(signature(selection.descs[table]), "pinned"))
            return _run_one(self, own, call, table, args, kwargs)
        guard.warn_once("template consensus alone", "AUTOTUNE_MODE=consensus without a torch.distributed process "
                        "group: template selections are timed by this process alone", logging.INFO, scope="process")
        alone = guard.facts.ask("rank_now", (0, 1))[1] == 1
        return _timed(self, own, selection, epoch, call, args, kwargs, "timed", for_job=alone)[0]
    signatures = [signature(d) for d in selection.descs]
    box = {}

    def tune():  # on the claimer only, when its table lacks the key (a table's entry goes with the claim)
        box["result"], index = _timed(self, own, selection, epoch, call, args, kwargs, "consensus", for_job=True)
        if index is None:
            raise SelectionError(f"autotune_guard consensus: {key.what()}: Inductor's selection gave no choice")
        return signatures[index]

    index, tuned_here, _ = engine.decide(
        store, key.what(), consensus.decision_name(key.arch, key.kernel, key.key),
        guard.facts.ask("rank_now", (0, 1))[0], signatures, tune, epoch.policy.consensus_timeout,
        dead_after=epoch.policy.consensus_dead_after, from_table=None if table is None else signatures[table])
    if tuned_here:
        return box["result"]
    how = "table" if index == table else "consensus"  # the job followed this rank's table entry too
    guard.note(epoch, key, Choice(signatures[index], how), _record(selection, epoch, index, how, None))
    return _run_one(self, own, call, index, args, kwargs)


def _table_index(selection: Selection, epoch):
    if not epoch.policy.table_path:
        return None
    key = selection.key
    entry = current().table_entry(epoch, key.arch, key.kernel, key.key)
    return table_index(entry, selection.descs, {})
