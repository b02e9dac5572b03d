"""The Triton adapter: carries out the policy against Triton's ``Autotuner``.

``patch(autotuner_module)`` puts the guard's ``run``, ``__init__`` and (3.8+) ``prune_configs`` on
``Autotuner`` (seen through every alias) through the one patching idiom, and wraps the ``run`` of
library subclasses; ``provide_facts`` tells the runtime the arch, Triton's Config defaults and
version. How a launch goes is ``launch`` (one strategy per autotuner and epoch).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from functools import cached_property

from ...core.errors import UnsupportedError
from ...runtime import current
from ... import _patching
from . import foreign, guarded, library, provenance, seam
from .registry import Capabilities, registry
from .tuner import strategy_of

__all__ = ["patch", "unpatch", "loaded_module", "provide_facts", "check_supported", "strategy_of", "watch_timers",
           "MIN_TRITON", "NEWEST_TESTED_TRITON"]

logger = logging.getLogger("autotune_guard")

MIN_TRITON = (3, 3)
PRUNING_PINS = (3, 8)  # from here on Triton caches a pruning result of one config without timing
NEWEST_TESTED_TRITON = (3, 9)  # the newest release the suite runs against; a newer one warns once
# The library autotuner families, each a module of this package that registers itself (``families``).
FAMILY_MODULES = ("flaggems", "gptq")


def _register_families() -> None:
    for name in FAMILY_MODULES:
        importlib.import_module(f"{__name__}.{name}")


def patch(autotuner_module) -> None:
    """Patch ``autotuner_module.Autotuner`` (once); raises for a Triton this package does not support."""
    version = check_supported(autotuner_module)
    cls = autotuner_module.Autotuner
    if _patching.patched(cls, "run") is not None:
        return
    reg = registry()
    reg.caps = Capabilities(
        version=version, pins_through_pruning=version >= PRUNING_PINS,
        # a newer release may change its run's cached path: there, Triton's run under the lock
        writes_out_decided=PRUNING_PINS <= version <= NEWEST_TESTED_TRITON,
        writes_out_cached=MIN_TRITON <= version <= NEWEST_TESTED_TRITON,
        init_needs_timer=not isinstance(inspect.getattr_static(cls, "do_bench", None), cached_property))
    _register_families()  # before any subclass's run is wrapped: a family's governs its own
    reg.original_run = cls.run
    reg.original_init = cls.__init__
    _patching.patch(cls, "run", guarded.run)
    _patching.patch(cls, "__init__", guarded.init)
    if reg.caps.pins_through_pruning:
        reg.original_prune = cls.prune_configs
        _patching.patch(cls, "prune_configs", guarded.prune)
    for sub in library.subclasses(cls):  # autotuner classes defined before the patch
        library.wrap_overriding_run(sub)
    reg.autotuner_class = cls
    jit = sys.modules["triton.runtime.jit"]
    foreign.watch_subclasses(jit, autotuner_module.Config, (cls, autotuner_module.Heuristics, jit.JITFunction))
    if "triton.testing" in sys.modules:  # else activation watches for its import
        foreign.watch_timers(sys.modules["triton.testing"])
    guard = current()
    guard.on_new_epoch(_on_new_epoch)
    provide_facts(guard)
    if guard.epoch.installed is not None:
        seam.chain_listener(guarded.interpreting())


def watch_timers(testing_module) -> None:
    """The sentinel on Triton's timers (``triton.testing``), once that module is imported."""
    foreign.watch_timers(testing_module)


def loaded_module():
    """``triton.runtime.autotuner`` if Triton has been imported, else None (never imports it)."""
    return sys.modules.get("triton.runtime.autotuner")


def unpatch(autotuner_module) -> None:
    """Triton's own methods back on ``Autotuner`` (the guard's states on autotuners are ignored by them)."""
    cls = autotuner_module.Autotuner
    registry().drop_direct()
    for name in ("prune_configs", "__init__", "run"):
        found = _patching.patched(cls, name)
        if found is not None:
            found.undo()


def _on_new_epoch(epoch) -> None:
    registry().drop_direct()
    if epoch.installed is not None and registry().original_run is not None:
        seam.chain_listener(guarded.interpreting())


def check_supported(autotuner_module) -> tuple:
    """Triton's (major, minor); raises for a release this package does not support."""
    import triton

    version = getattr(triton, "__version__", "0")
    numbers = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    cls = getattr(autotuner_module, "Autotuner", None)
    if numbers < MIN_TRITON or cls is None or not all(hasattr(cls, n) for n in ("run", "prune_configs")):
        raise UnsupportedError(f"autotune_guard supports Triton {MIN_TRITON[0]}.{MIN_TRITON[1]} and newer; this is "
                               f"Triton {version}. Set AUTOTUNE_DISABLE=1 to run unguarded.", what="triton", version=version)
    if numbers > NEWEST_TESTED_TRITON:
        # Still guarded: the patch checks the methods it needs above; a newer release may change what they do.
        newest = ".".join(map(str, NEWEST_TESTED_TRITON))
        current().warn_once("newer triton", f"Triton {version} is newer than {newest}, the newest release "
                            "autotune_guard is tested with; it is guarded all the same (AUTOTUNE_DISABLE=1 runs "
                            "unguarded)", scope="process", name="newer-triton")
    return numbers


def provide_facts(guard) -> None:
    guard.facts.provide("arch", _arch)
    guard.facts.provide("config_defaults", seam.config_defaults)
    guard.facts.provide("triton_version", _triton_version)
    # the process's FP fusion (the kernels' own enable_fp_fusion is in their provenance): evidence files carry it
    guard.facts.provide("numerics", lambda: provenance.fusion_now(None, _triton_version()))


def _arch() -> str:
    """``sm90``, ``gfx942`` or ``interpret``; read at the first launch that needs it, so that
    installing never initializes CUDA."""
    if guarded.interpreting():
        return "interpret"
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    return f"sm{target.arch}" if target.backend == "cuda" else str(target.arch).split(":")[0]


def _triton_version():
    return getattr(sys.modules.get("triton"), "__version__", None)
