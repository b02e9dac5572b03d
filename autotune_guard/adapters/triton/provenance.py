"""What a kernel is, for records and tables (``core.model.provenance``), and the check, in pinned
mode and in consensus's table, that names a table entry recorded against another version of the
kernel (other source, candidates or tuning options): one line per kernel, or refused with
AUTOTUNE_ON_MISS=error."""

from __future__ import annotations

import inspect
import os
import sys

from ...deciding import check_table_provenance
from ...core.model import descriptor, provenance
from ...core.numerics import fp_fusion
from ...runtime import current
from .registry import registry
from .seam import configs_of, jit_function
from .tuner import _source_of

PROVENANCE_ATTR = "_autotune_guard_provenance"
REQUESTED_ATTR = "_autotune_guard_fp_fusion"  # the kernel's own enable_fp_fusion, seen at a launch


def of(autotuner) -> dict:
    """The autotuner's provenance over its declared candidates (kept while ``configs`` is the same list)."""
    kept = autotuner.__dict__.get(PROVENANCE_ATTR)
    if kept is not None and kept[0] is configs_of(autotuner):
        return kept[1]
    with registry().lock_of(autotuner):  # a swapped launch of another key (``calls.swap_run``) is over
        return _of(autotuner)


def _of(autotuner) -> dict:
    configs = configs_of(autotuner)
    kept = autotuner.__dict__.get(PROVENANCE_ATTR)
    if kept is not None and kept[0] is configs:
        return kept[1]
    facts = current().facts
    options = {"key": list(getattr(autotuner, "keys", []) or []),
               "reset_to_zero": list(getattr(autotuner, "reset_to_zero", None) or []),
               "restore_value": list(getattr(autotuner, "restore_value", None) or []),
               "prune": _name(getattr(autotuner, "early_config_prune", None)),
               "perf_model": _name(getattr(autotuner, "perf_model", None)),
               "strategy": [_name(s) for s in getattr(autotuner, "strategy", None) or []]
               if isinstance(getattr(autotuner, "strategy", None), (list, tuple)) else None}
    found = provenance(source_text(autotuner), [descriptor(c) for c in configs], options,
                       facts.get("triton_version"), facts.get("arch"),
                       fusion_now(autotuner.__dict__.get(REQUESTED_ATTR), facts.get("triton_version")))
    autotuner.__dict__[PROVENANCE_ATTR] = (configs, found)
    return found


def note_launch(autotuner, kwargs) -> None:
    """Keep the kernel's own ``enable_fp_fusion`` from a launch's arguments (where it gives one)."""
    requested = kwargs.get("enable_fp_fusion")
    if requested is not None and autotuner.__dict__.get(REQUESTED_ATTR) is not bool(requested):
        autotuner.__dict__[REQUESTED_ATTR] = bool(requested)
        autotuner.__dict__.pop(PROVENANCE_ATTR, None)  # kept without it


def fusion_now(requested, triton_version) -> dict:
    """The effective FP fusion now: Triton's knobs where it has them (a program may set them), else
    (3.3) the variable its NVIDIA backend reads, on unless set to something other than "1"."""
    language = getattr(getattr(sys.modules.get("triton"), "knobs", None), "language", None)
    default = getattr(language, "default_fp_fusion", None)
    if default is None:
        default = os.environ.get("TRITON_DEFAULT_FP_FUSION", "1") == "1"
    force = bool(getattr(language, "force_disable_fp_fusion", False))
    return fp_fusion(force, bool(default), requested, os.environ, triton_version)


def source_text(autotuner) -> str:
    """The kernel's source: the JITFunction's text, else (the interpreter's function) the Python
    function's from ``def`` on, read from its file; '' where neither is known."""
    source = _source_of(jit_function(autotuner))
    if source:
        return source
    fn = getattr(autotuner, "base_fn", None) or getattr(autotuner, "fn", None)
    for _ in range(8):
        if inspect.isfunction(fn):
            try:
                text = inspect.getsource(fn)
            except (OSError, TypeError):
                return ""
            return text[text.find("def "):]  # from ``def``, as JITFunction.src: no decorators (configs)
        fn = getattr(fn, "fn", None)
    return ""


def _name(fn):
    return None if fn is None else f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def check_pinned(autotuner, state, choice_key) -> None:
    """Before a key is pinned from a table (pinned mode's pick; consensus's ``table_index``, on
    every rank): the engine's check against the kernel as it is now (``of``)."""
    check_table_provenance(state.epoch, choice_key, lambda: of(autotuner))
