"""Inductor's compiled-graph caches and max-autotune's template selection: the FX graph cache (and the
AOTAutograd cache, whose key details are a subclass) would serve a compiled graph, its template
choices baked in, without any selection the guard sees.

Through ``FxGraphHashDetails.__init__`` (torch 2.11, 2.13): under a policy that governs template
selection, a max-autotune compile's key gets the pinned rule's fingerprint in pinned mode (mode,
on-miss rule, chaos rank, the tables' contents: a graph compiled under the same rule and tables
made the same choices), and bypasses both caches in the other modes (Inductor's own
``BypassFxGraphCache``), so that each selection is made, and logged, in the process.
"""

from __future__ import annotations

import logging
import sys

from ...runtime import current
from ... import _patching
from . import template_choices as tc
from . import templates


def patch_codecache(module) -> list:
    """Post-import hook of ``torch._inductor.codecache``: the guard's part of the FX graph (and
    AOTAutograd) cache key, through ``FxGraphHashDetails.__init__``."""
    cls = getattr(module, "FxGraphHashDetails", None)
    bypass = getattr(module, "BypassFxGraphCache", None)
    if cls is None or bypass is None:
        guard = current()
        guard.warn_once("no fx cache seam", "torch.compile: this torch's FX graph cache has no seam autotune_guard "
                        "knows: a max-autotune graph it serves keeps the template choices it was compiled with",
                        scope="process")
        guard.note_ungoverned("torch.compile FX graph cache", "its graphs' template choices are not checked")
        return []
    return [_patching.patch(cls, "__init__", _details_of(cls, bypass))]


def _details_of(cls, bypass):
    def __init__(self, *args, **kwargs):
        _patching.original(cls, "__init__")(self, *args, **kwargs)
        tag = cache_tag()
        if tag == "bypass":
            mode = current().epoch.policy.mode
            raise bypass(f"autotune_guard {mode} mode: max-autotune's template selection is made in this process")
        if tag is not None:
            self.autotune_guard = tag  # part of the pickled details, hence of the key

    return __init__


def cache_tag() -> str | None:
    """What a compile's cache key gets: None (no policy, no max-autotune, selection out of scope or
    not governed: the key as Inductor makes it), ``bypass``, or the pinned rule's fingerprint."""
    guard = current()
    epoch = guard.epoch
    if epoch.installed is None:
        return None
    from torch._inductor import config

    if not (getattr(config, "max_autotune", False) or getattr(config, "max_autotune_gemm", False)):
        return None
    if templates.SELECTOR_MODULE not in sys.modules:
        import torch._inductor.select_algorithm  # noqa: F401  (its post-import hook puts the seam in place)
    templates.on_import()
    policy = epoch.policy
    if not templates.governed() or not policy.in_scope(tc.kernel_name("mm")):
        return None
    if policy.mode != "pinned":
        guard.warn_once("fx cache bypass", f"torch.compile max-autotune, {policy.mode} mode: Inductor's FX graph "
                        "and AOTAutograd caches are bypassed, so that each template selection is made (and logged) "
                        "in this process", logging.INFO, scope="process")
        return "bypass"
    rank = (guard.facts.get("rank_world") or (0, 1))[0] if policy.chaos else None
    return f"pinned|{policy.on_miss}|chaos={rank}|{tc.tables_fingerprint(policy.table_path)}"
