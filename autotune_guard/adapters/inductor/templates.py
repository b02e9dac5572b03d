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
* consensus: one rank times (as record), the others pass on its winner;
* auto: Inductor selects as it would; the choice is logged (``cache hit`` when its cache answered).

A selection is a family of the decision engine (``deciding``): :class:`Template` picks with the
template variant of the pinned rule and tunes through Inductor's own selection; the engine carries
out the mode, and ``select`` passes on the one choice it made (or returns what Inductor's own
selection returned, when that ran here).

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

from ... import deciding
from ...core.errors import SelectionError
from ...core.model import ChoiceKey, signature
from ...core.pinned import Pick
from ...runtime import current
from ... import _patching
from . import seam as inductor  # Inductor's internals, read there (``seam`` below is this adapter's state)
from . import template_choices as tc
from .state import state

logger = logging.getLogger("autotune_guard")


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


class Template(deciding.Tunable):
    """One selection as the engine sees it. ``context``: (the selector, Inductor's own ``__call__``,
    the call's (name, offered, input_nodes, layout), its other args, its kwargs)."""

    noun = "template selections"
    uses_config_defaults = False  # a choice is its text: no Config fields to default

    def __init__(self, selection: Selection, epoch, context):
        self.selection, self.epoch, self.context = selection, epoch, context
        self.key, self.descriptors = selection.key, selection.descs
        self.returned = None  # what Inductor's own selection returned, once it ran here

    def pick(self, epoch) -> Pick:
        """The pinned rule's template variant (``tc.pinned_pick``); a miss is said once per key."""
        guard = current()
        key = self.key
        entry = guard.table_entry(epoch, key.arch, key.kernel, key.key)
        rank = (guard.facts.get("rank_world") or (0, 1))[0] if epoch.policy.chaos else 0
        pick = tc.pinned_pick(key, self.descriptors, self.selection.externs, entry, epoch.policy, rank)
        if pick.why == "deterministic":
            reason = "its table entry matches no choice offered" if entry is not None else "no table entry"
            guard.warn_once(f"template miss {key.text()}", f"torch.compile template selection {key.what()}: {reason}: "
                            f"Inductor's deterministic choice, {signature(self.descriptors[pick.index])}, untimed; "
                            "record and merge a table to pin a timed winner")
        return pick

    def tune(self, how: str) -> deciding.Tuned | None:
        """Inductor selects. Outside auto it decides here, not deferred, with its autotune caches off;
        None: it deferred the choice to its scheduler (auto: noted by ``_deferred``)."""
        selector, own, call, args, kwargs = self.context
        here = self.epoch.policy.mode != "auto"
        seam = state()
        bound, split = inductor.choosing_call(seam.call_signature, (selector, *call, *args), kwargs, here)
        before = inductor.benchmark_passes()
        local = seam.local
        local.active, local.timings = self.key, None
        try:
            with _caches_off(here):
                result = own(*bound.args, **bound.kwargs)
            timings = local.timings
        finally:
            local.active = local.timings = None
        self.returned, chosen = split(result)
        selection = self.selection
        index = selection.index_of(chosen) if chosen is not None else _unseen(selector, self)
        if index is None:
            return None
        said = None
        if inductor.benchmark_passes() == before:  # nothing timed: Inductor's autotune cache answered, or its own rule
            said = "cache hit" if timings else "library"
        return deciding.Tuned(selection.descs[index], index, selection.measured(timings), self.returned, said)

    def run_one(self, index: int):
        """Inductor's own selection, offered the one chosen choice: it returns at once, timing nothing."""
        selector, own, (name, offered, input_nodes, layout), args, kwargs = self.context
        return own(selector, name, [offered[index]], input_nodes, layout, *args, **kwargs)


SELECTOR_MODULE = "torch._inductor.select_algorithm"
# Modules that finish importing after the selector module has (they import it): its post-import hook
# can fire while it is still half-imported (it imports Inductor's runtime, whose hook registers this one).
AFTER_SELECTOR = (SELECTOR_MODULE, "torch._inductor.kernel.mm", "torch._inductor.lowering", "torch._inductor.graph")


def on_import(_module=None) -> None:
    """Post-import hook of the modules of ``AFTER_SELECTOR``: patch the selector once it is whole."""
    module = sys.modules.get(SELECTOR_MODULE)
    seam = state()
    if module is None or seam.tried or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return
    seam.tried = True
    patch_selection(module)


def patch_selection(module) -> list:
    """Post-import hook of ``torch._inductor.select_algorithm``: the guard's ``__call__`` and
    ``do_autotuning`` on ``AlgorithmSelectorCache``; a torch without that seam keeps the naming at
    the timer (``adapters.triton.foreign``)."""
    cls = inductor.selector_class(module)
    if cls is None:
        current().warn_once("no template seam", "torch.compile max-autotune: this torch's template selection "
                            "(select_algorithm.AlgorithmSelectorCache) has no seam autotune_guard knows; each "
                            "selection is named as not governed when it times its choices", logging.INFO, scope="process")
        return []
    seam = state()
    seam.call_signature = inspect.signature(cls.__call__)
    seam.tuning_signature = inspect.signature(cls.do_autotuning)
    patches = [_patching.patch(cls, "__call__", _call_of(cls)), _patching.patch(cls, "do_autotuning", _tuning_of(cls))]
    seam.governed = True
    return patches


def governed() -> bool:
    return state().governed


def timing_now() -> bool:
    """Whether this thread is inside a selection the guard governs while Inductor times its choices
    (a candidate's own tuning then is part of that timing, not a choice of its own)."""
    return getattr(state().local, "active", None) is not None


def _call_of(cls):
    def __call__(self, name, choices, input_nodes, layout, *args, **kwargs):
        own = _patching.original(cls, "__call__")
        return select(self, own, (name, choices, input_nodes, layout), args, kwargs)

    return __call__


def _tuning_of(cls):
    def do_autotuning(self, *args, **kwargs):
        timings = _patching.original(cls, "do_autotuning")(self, *args, **kwargs)
        if isinstance(timings, dict):
            seam = state()
            if getattr(seam.local, "active", None) is not None:
                seam.local.timings = timings
            else:
                _deferred(*inductor.tuning_of(seam.tuning_signature, (self, *args), kwargs), timings)
        return timings

    return do_autotuning


def select(self, own, call, args, kwargs):
    """One selection under the current epoch; ``own`` is Inductor's ``__call__``."""
    given = call
    name, choices, input_nodes, layout = call
    guard = current()
    epoch = guard.epoch
    if epoch.installed is None:
        return own(self, *call, *args, **kwargs)
    policy = epoch.policy
    kernel = tc.kernel_name(str(name))
    if not policy.in_scope(kernel):
        return own(self, *call, *args, **kwargs)
    offered = inductor.preprocessed(self, choices)  # Inductor's own filters, as it runs them
    call = (name, offered, input_nodes, layout)
    if len(offered) < 2:  # nothing to choose: Inductor's own path (and its error for none)
        return own(self, *call, *args, **kwargs)
    selection = _describe(guard, kernel, offered, input_nodes, layout)
    guard.launched(epoch, kernel, ())
    if policy.enumerate:
        logger.info("torch.compile template selection %s: %d choices, %s", selection.key.what(), len(offered),
                    policy.mode)
    template = Template(selection, epoch, (self, own, call, args, kwargs))

    def apply(index, tuned):  # (tuned: Inductor's own selection ran here, and the rule returns what it returned)
        if index is None:  # deferred to Inductor's scheduler (auto)
            return lambda: template.returned
        return lambda: template.run_one(index)

    return deciding.first_launch(epoch, lambda: template, apply, lambda: select(self, own, given, args, kwargs))


def _describe(guard, kernel: str, offered, input_nodes, layout) -> Selection:
    externs = [inductor.is_extern(c) for c in offered]
    texts = [tc.choice_text(*inductor.choice_label(c), extern) for c, extern in zip(offered, externs)]
    device = getattr(getattr(layout, "device", None), "type", "?")
    key = ChoiceKey(tc.arch_of(device, guard.facts.get("arch") if device == "cuda" else None), kernel,
                    inductor.inputs_key(input_nodes))
    return Selection(key, offered, tc.descriptors(texts), externs)


def _unseen(selector, template: Template):
    """The choice Inductor made without returning it: its deterministic pick (``config.deterministic``);
    else (auto) deferred to its scheduler, noted when that times it (``_deferred``)."""
    selection, mode = template.selection, template.epoch.policy.mode
    picked = inductor.deterministic_choice(selector, selection.offered)
    if picked is not None:
        return selection.index_of(picked)
    if mode == "auto":
        adapter = state()
        with adapter.lock:
            adapter.pending[(selection.key.kernel, selection.key.key)] = template
        return None
    raise SelectionError(f"autotune_guard: {selection.key.what()}: Inductor did not say which choice it selected, so "
                         f"{mode} mode cannot note it; this torch's select_algorithm is not one the guard knows")


def _deferred(name, inputs_key, timings) -> None:
    """Timings of a selection Inductor deferred to its scheduler (benchmark fusion, auto mode): the
    fastest is noted as timed (the scheduler may still prefer another once it fuses an epilogue)."""
    adapter = state()
    with adapter.lock:
        template = adapter.pending.pop((tc.kernel_name(str(name)), inputs_key), None)
    if template is None:
        return
    selection = template.selection
    finite = {c: t for c, t in timings.items() if math.isfinite(float(t)) and selection.index_of(c) is not None}
    if not finite:
        return
    index = selection.index_of(min(finite, key=finite.__getitem__))
    tuned = deciding.Tuned(selection.descs[index], index, selection.measured(timings))
    deciding.noted(template.epoch, template, tuned, "timed")


def _caches_off(deciding: bool):
    """Inductor's local and remote autotune caches off: a record or a job's decision needs timings."""
    if not deciding:
        return contextlib.nullcontext()
    from torch._inductor import config

    return config.patch({name: False for name in ("autotune_local_cache", "autotune_remote_cache")
                         if hasattr(config, name)})
