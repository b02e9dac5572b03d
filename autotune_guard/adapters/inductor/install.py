"""The guard's methods on Inductor's ``CachingAutotuner`` and ``AutotuneCache``, put there through
the one patching idiom (the seam, torch 2.6 through 2.13: ``autotune_to_one_config`` must leave one
launcher in ``self.launchers``).

Besides the step (``step.autotune``): ``benchmark_all_configs`` keeps Inductor's timings for the
record; the re-tuners (coordinate descent, combo kernels) are skipped under pinned and named as not
governed otherwise; Inductor's ``.best_config`` cache is not read under pinned, consensus and
record (the choice must come from the policy, not the disk), and not written under pinned.
"""

from __future__ import annotations

import logging

from ...core.errors import SelectionError
from ...runtime import current
from ... import _patching
from . import names, seam, step, template_cache, templates
from .state import state

logger = logging.getLogger("autotune_guard")

# Steps that re-time a kernel after its config was chosen: (method, the flag Inductor sets on the
# config once the step ran, what the step is); a tuple, so nothing at module level can change.
RETUNERS = (
    ("coordinate_descent_tuning", "found_by_coordesc", "coordinate descent tuning "
     "(torch._inductor.config.coordinate_descent_tuning)"),
    ("_combo_sequential_autotune", "found_by_combo_autotune", "combo-kernel block-size tuning"),
)


def patch(heuristics) -> list:
    """Post-import hook of ``torch._inductor.runtime.triton_heuristics``: the guard's methods on its
    classes (once); returns the patches in force. Raises into torch's import only when the seam is
    missing and the installed policy asks for errors (``AUTOTUNE_ON_MISS=error``)."""
    cls = getattr(heuristics, "CachingAutotuner", None)
    if cls is None or not all(callable(getattr(cls, m, None)) for m in ("autotune_to_one_config",
                                                                        "benchmark_all_configs")):
        seam_missing("torch._inductor.runtime.triton_heuristics.CachingAutotuner.autotune_to_one_config")
        return []
    patches = [_patching.patch(cls, "autotune_to_one_config", _autotune_of(cls)),
               _patching.patch(cls, "benchmark_all_configs", _benchmark_of(cls))]
    for method, flag, what in RETUNERS:
        if callable(getattr(cls, method, None)):
            patches.append(_patching.patch(cls, method, _retuner_of(cls, method, flag, what)))
    cache_cls = getattr(heuristics, "AutotuneCache", None)  # imported there from .autotune_cache
    if cache_cls is None or not callable(getattr(cache_cls, "read_best", None)):
        seam_missing("torch._inductor.runtime.autotune_cache.AutotuneCache.read_best")
    else:
        patches.append(_patching.patch(cache_cls, "read_best", _read_best_of(cache_cls)))
        if callable(getattr(cache_cls, "save", None)):
            patches.append(_patching.patch(cache_cls, "save", _save_of(cache_cls)))
    _watch_templates()
    return patches


def _watch_templates() -> None:
    """max-autotune's template selection and the FX graph cache key (``templates``), patched when
    Inductor imports them (at once if it has); the Guard's registry registers each hook once."""
    guard = current()
    for module in templates.AFTER_SELECTOR:
        guard.when_imported(module, templates.on_import, once=True)
    guard.when_imported("torch._inductor.codecache", template_cache.patch_codecache, once=True)


def seam_missing(what: str) -> None:
    """This torch's Inductor lacks a method the guard needs: said, noted as ungoverned, or raised."""
    guard = current()
    version = guard.facts.ask("torch_version") or "?"
    message = (f"autotune_guard cannot govern autotuning under torch.compile with torch {version}: {what} is "
               "missing. Kernels autotuned by Inductor in this process are NOT governed")
    policy = guard.epoch.installed  # at import: the policy as given (a derived mode is not settled here)
    if policy is not None and policy.on_miss == "error":
        raise SelectionError(message + " (AUTOTUNE_ON_MISS=error)")
    logger.error("%s", message)
    guard.note_ungoverned("torch.compile", "this torch's Inductor has no seam autotune_guard knows")


def ungoverned(guard, name: str, why: str, policy) -> None:
    """A choice made in this process that the guard did not govern: named once, counted at exit,
    refused with ``AUTOTUNE_ON_MISS=error``."""
    if not guard.note_ungoverned(name, why):
        return
    message = f"torch.compile kernel {name}: {why}; autotune_guard did not govern this choice"
    if policy.on_miss == "error":
        raise SelectionError("autotune_guard: " + message + " (AUTOTUNE_ON_MISS=error)")
    logger.warning("%s", message)


def _autotune_of(cls):
    def autotune_to_one_config(self, *args, **kwargs):
        return step.autotune(self, _patching.original(cls, "autotune_to_one_config"), args, kwargs)

    return autotune_to_one_config


def _benchmark_of(cls):
    def benchmark_all_configs(self, *args, **kwargs):
        timings = _patching.original(cls, "benchmark_all_configs")(self, *args, **kwargs)
        step.keep_timings(self, timings)
        return timings

    return benchmark_all_configs


def _retuner_of(cls, method: str, flag: str, what: str):
    """Pinned: the step is skipped (its flag set, so Inductor does not ask again): pinned mode never
    times. Other modes: it runs, and the kernel is named as not governed."""

    def retune(self, launcher, *args, **kwargs):
        own = _patching.original(cls, method)
        guard = current()
        epoch = guard.epoch
        if epoch.installed is None:
            return own(self, launcher, *args, **kwargs)
        policy = epoch.policy
        name, unmatched = names.kernel_name(self)
        if unmatched:
            step.say_unmatched(guard, unmatched, name)
        if not policy.in_scope(name) or templates.timing_now():  # (a template candidate timed for a selection)
            return own(self, launcher, *args, **kwargs)
        if policy.mode == "pinned":
            seam.mark_retuned(launcher, flag)
            guard.warn_once(f"skip|{what}|{name}", f"torch.compile kernel {name}: {what} skipped, pinned mode "
                            "does not time", logging.INFO, scope="process")
            return launcher
        ungoverned(guard, name, f"{what} re-timed it after its config was chosen", policy)
        return own(self, launcher, *args, **kwargs)

    return retune


def _read_best_of(cache_cls):
    def read_best(self, inductor_meta, configs):
        guard = current()
        policy = guard.epoch.policy
        if policy is not None and policy.mode in ("pinned", "consensus", "record"):
            return None  # the policy decides, not a winner some earlier process timed
        best = _patching.original(cache_cls, "read_best")(self, inductor_meta, configs)
        if best is not None and policy is not None:
            name = seam.meta_kernel_name(inductor_meta) or "?"
            ungoverned(guard, f"inductor cache:{name}", "Inductor's .best_config cache chose its config (not timed, "
                       "not observed in this process)", policy)
        return best

    return read_best


def _save_of(cache_cls):
    def save(self, *args, **kwargs):
        policy = current().epoch.policy
        if policy is not None and policy.mode == "pinned":
            return None  # a pinned choice is not a timing result: it must not become a later run's "best"
        return _patching.original(cache_cls, "save")(self, *args, **kwargs)

    return save
