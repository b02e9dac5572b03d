"""GPTQ-style ``custom_autotune`` (AutoGPTQ's ``CustomizedTritonAutoTuner``, GPTQ-triton's
``Autotuner``, their copies in GPTQModel and model repositories), governed in every mode.

Such a tuner is a ``triton.KernelInterface`` of its own. Its ``run`` keys by the arguments at
``key_idx`` (rounded to powers of two with ``nearest_power_of_two``; that key is the key of the log
and the tables) and times what ``prune_configs`` leaves with ``_bench`` only when ``cache`` lacks
the key. That ``cache`` is the seam; the family decides a key's first launch (``deciding.decide``):
* pinned, a consensus followed, a table's entry: the chosen candidate goes into ``cache`` first,
  so the tuner's run launches it and times nothing;
* auto, record, the consensus claimer: an earlier policy's entry is hidden and the tuner times in
  this process; its winner (``cache[key]``) is noted with its timings.
"""

from __future__ import annotations

import math

from ... import deciding
from ...core.model import ChoiceKey, base_name, descriptor, key_text, provenance, signature
from ...deciding import families as registered
from ...runtime import current
from .foreign import kernel_of
from .provenance import fusion_now, source_text
from .registry import registry
from .seam import configs_of, set_call_arguments, timings_now
from .tuner import MISSING, NAME_ATTR

DECIDED_ATTR = "_autotune_guard_gptq"  # on the tuner: (epoch generation, the keys decided under it)


class GptqFamily(registered.Family):
    name = "GPTQ custom_autotune"
    recognises = "kernel-interface-run"

    def shaped(self, owner) -> bool:
        """custom_autotune's three methods, defined together by one class (a class with only some,
        or that overrides one, may compute its key otherwise: it stays named as not governed)."""
        return all(callable(owner.__dict__.get(n)) for n in ("run", "_bench", "prune_configs"))

    def run(self, autotuner, original, args, kwargs):
        epoch = current().epoch
        if epoch.installed is None or len(getattr(autotuner, "configs", ())) < 2:
            return original(autotuner, *args, **kwargs)  # no policy, or nothing to choose
        try:
            key = library_key(autotuner, args)
        except (IndexError, TypeError, ValueError):  # the tuner's own run says what is wrong
            return original(autotuner, *args, **kwargs)
        found = autotuner.__dict__.get(DECIDED_ATTR, (None, ()))  # (read only: made under the lock)
        if found[0] == epoch.generation and key in found[1] and key in autotuner.cache:
            return original(autotuner, *args, **kwargs)  # the steady state: the tuner's cached path
        made = []

        def apply(index, tuned):
            if made and tuned is None and index is not None:
                autotuner.cache[key] = made[0].live[index]
            if made:
                _decided(autotuner, epoch).add(key)
            return None if tuned is not None else (lambda: original(autotuner, *args, **kwargs))

        # the tuner keeps per-launch state: one first launch at a time (its lock)
        return deciding.first_launch(epoch, lambda: _pending(epoch, autotuner, original, args, kwargs, key, made),
                                     apply, lambda: self.run(autotuner, original, args, kwargs),
                                     gate=registry().lock_of(autotuner))


def _pending(epoch, autotuner, original, args, kwargs, key, made: list):
    """The key's Tunable (also put in ``made``), or None where it is decided already or left to the
    tuner's own tuning (AUTOTUNE_MODULES, AUTOTUNE_CONFIG_INVARIANT)."""
    decided = _decided(autotuner, epoch)
    if key in decided and key in autotuner.cache:
        return None
    # module.function of the Python function under fn (the interpreter's function is Triton's own)
    qualified = autotuner.__dict__.setdefault(NAME_ATTR, kernel_of(autotuner) or type(autotuner).__qualname__)
    if epoch.policy.mode == "off" or not epoch.policy.in_scope(base_name(qualified)):
        decided.add(key)
        return None
    current().launched(epoch, qualified, {k for c in configs_of(autotuner) for k in c.kwargs})
    made.append(GptqTunable(epoch, autotuner, original, args, kwargs, key, qualified))
    return made[0]


def library_key(autotuner, args) -> tuple:
    """The key custom_autotune's ``run`` decides by, computed as it computes it."""
    key = tuple(args[i] for i in autotuner.key_idx)
    if getattr(autotuner, "nearest_power_of_two", False):
        key = tuple([2 ** int(math.log2(x) + 0.5) for x in key])
    return key


def _decided(autotuner, epoch) -> set:  # the keys decided under ``epoch``; the caller holds the tuner's lock
    found = autotuner.__dict__.get(DECIDED_ATTR)
    if found is None or found[0] != epoch.generation:  # a new policy decides every key again
        found = autotuner.__dict__[DECIDED_ATTR] = (epoch.generation, set())
    return found[1]


class GptqTunable(deciding.Tunable):
    """One key's first launch. The candidates are what the tuner's ``prune_configs`` leaves (its
    pruner may make new Config objects): those its run would time, and those ``cache`` may hold."""

    noun = "GPTQ custom_autotune choices"

    def __init__(self, epoch, autotuner, original, args, kwargs, library_key, qualified):
        self.epoch, self.autotuner, self.original, self.args, self.kwargs = epoch, autotuner, original, args, kwargs
        self.library_key = library_key
        self.key = ChoiceKey(current().facts.get("arch"), qualified, key_text(library_key))
        set_call_arguments(autotuner, args)  # what pruning reads, as the tuner's run sets it
        self.live = list(autotuner.prune_configs(kwargs))
        self.descriptors = [descriptor(c) for c in self.live]

    def every(self):
        return [descriptor(c) for c in configs_of(self.autotuner)]

    def provenance(self) -> dict:
        tuner, facts = self.autotuner, current().facts
        options = {n: getattr(tuner, n, None) for n in ("key_idx", "nearest_power_of_two", "configs_top_k")}
        options.update({n: _named(getattr(tuner, n, None)) for n in ("early_config_prune", "perf_model")})
        version = facts.get("triton_version")
        return provenance(source_text(tuner), self.every(), options, version, facts.get("arch"),
                          fusion_now(self.kwargs.get("enable_fp_fusion"), version))

    def check_provenance(self) -> None:
        deciding.check_table_provenance(self.epoch, self.key, self.provenance)

    def tune(self, how: str) -> deciding.Tuned:
        """The tuner's own run times the candidates (an entry of an earlier policy hidden first)."""
        tuner, key = self.autotuner, self.library_key
        earlier = tuner.cache.pop(key, MISSING)
        before = timings_now(tuner)
        try:
            result = self.original(tuner, *self.args, **self.kwargs)
        except BaseException:
            if earlier is not MISSING:  # a failed launch leaves the tuner as it was
                tuner.cache.setdefault(key, earlier)
            raise
        winner, timings = tuner.cache[key], timings_now(tuner)
        measured = {signature(descriptor(c)): [float(t) for t in (v if isinstance(v, (list, tuple)) else [v])]
                    for c, v in timings.items()} if isinstance(timings, dict) and timings is not before else None
        return deciding.Tuned(descriptor(winner), winner, measured, result)


def _named(fn):
    return None if fn is None else f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


registered.register(GptqFamily())
