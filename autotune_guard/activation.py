"""Activation: the post-import hooks, and carrying out a policy across the adapters (the
``install()`` of the API, and the environment's policy at Triton's import)."""

from __future__ import annotations

import logging
import os
import sys

from . import _watch, evidence, uncaught
from . import table_growth
from .adapters import distributed, redis_tables, torch_flags
from .adapters import triton as triton_adapter
from .core import settings
from .core.settings import AutotunePolicy, policy_from_settings
from .runtime import current

logger = logging.getLogger("autotune_guard")
_hooks_registered = False  # wrapt keeps every registration: a repeated install() registers none


def arm() -> None:
    """Register the post-import hooks once (each fires at once for a module imported already)."""
    global _hooks_registered
    if _hooks_registered:
        return
    try:
        import wrapt
    except Exception as exc:
        raise ImportError(f"autotune_guard is active (an AUTOTUNE_* variable is set) but its dependency wrapt cannot "
                          f"be imported ({exc!r}); reinstall autotune-guard, or set AUTOTUNE_DISABLE=1 to run "
                          "unguarded") from exc
    wrapt.register_post_import_hook(_on_autotuner, "triton.runtime.autotuner")
    wrapt.register_post_import_hook(_on_distributed, "torch.distributed")
    wrapt.register_post_import_hook(_on_inductor, "torch._inductor.runtime.triton_heuristics")
    wrapt.register_post_import_hook(triton_adapter.watch_timers, "triton.testing")
    _hooks_registered = True


def _on_autotuner(module) -> None:
    global _hooks_registered
    _watch.unwatch()
    try:
        on_triton_import(module)
    except BaseException as exc:
        # The failed import is rolled back and wrapt has dropped this hook: watch again, so that
        # retrying ``import triton`` fails the same way instead of running unguarded.
        _hooks_registered = False
        _watch.watch(arm)
        uncaught.mark_activation_error(exc)
        raise


def _inductor_flag(name: str, variable: str) -> bool:
    """Inductor's determinism config ``name`` for the derived mode (its adapter, loaded at need)."""
    from .adapters.inductor import flags

    return flags.flag(name, variable)


def _on_distributed(module) -> None:
    distributed.wrap_barriers(module)


def _watch_inductor() -> None:
    """The Inductor patch for a policy installed by the API (fires at once if Inductor is loaded)."""
    import wrapt

    wrapt.register_post_import_hook(_on_inductor, "torch._inductor.runtime.triton_heuristics")


def _on_inductor(module) -> None:
    from .adapters import inductor

    inductor.patch(module)


def carry_out(policy: AutotunePolicy) -> None:
    if policy.record_path:
        evidence.check_writable(policy.record_path, "AUTOTUNE_RECORD_PATH")
    if policy.digest_path:
        evidence.check_writable(policy.digest_path, "AUTOTUNE_DIGEST_PATH")
    redis_tables.configure(current(), policy)  # a table store that does not answer fails here (or is left out)
    table_growth.configure(policy)  # a table directory it cannot write fails here, before anything changes
    guard = current()
    module = triton_adapter.loaded_module()
    if module is not None:
        triton_adapter.patch(module)  # raises before changing anything if it cannot
    else:
        arm()
    torch_flags.provide_facts(guard, inductor_flag=_inductor_flag)
    distributed.provide_facts(guard)
    guard.replace(policy)
    evidence.configure(policy)
    configure_logging(policy.log_level)
    distributed.on_install(policy)
    _watch_inductor()
    uncaught.install(policy.mode)
    _started_with(policy, guard)


def _started_with(policy: AutotunePolicy, guard) -> None:
    """Say what is in force and why, and name what cannot take effect."""
    level = logging.INFO if policy.mode_from not in ("AUTOTUNE_MODE", settings.DERIVED) else logging.DEBUG
    logger.log(level, "mode %s, from %s", policy.mode, policy.mode_from)
    logger.debug("installed policy: %s", settings.describe(policy))
    if policy.foreign:
        logger.info("not autotune_guard settings, left to their tools: %s", ", ".join(policy.foreign))
    for warning in settings.ineffective_settings(policy, guard.startup):
        logger.warning("%s", warning)
    if not _numpy_importable():
        guard.warn_once("interpreter without numpy", "TRITON_INTERPRET=1 runs kernels through Triton's interpreter, "
                        "which needs numpy, and numpy cannot be imported here: install it (pip install numpy)",
                        scope="process")


def _numpy_importable() -> bool:
    """False only when Triton's interpreter is asked for and numpy cannot be imported (a lookup, no import)."""
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() not in ("1", "true", "yes", "on"):
        return True
    if "numpy" in sys.modules:
        return sys.modules["numpy"] is not None
    import importlib.util

    try:
        return importlib.util.find_spec("numpy") is not None
    except (ImportError, ValueError):
        return False


def on_triton_import(module) -> None:
    """The post-import hook of ``triton.runtime.autotuner``."""
    guard = current()
    if guard.epoch.installed is not None:  # install() ran before Triton was imported
        triton_adapter.patch(module)
        return
    found, env_file = settings.settings_from_environment()
    if settings.disabled(found):  # AUTOTUNE_DISABLE=1 in the env file (the .pth saw only the environment)
        configure_logging("INFO")
        logger.info("AUTOTUNE_DISABLE=1 in AUTOTUNE_ENV_FILE=%s: autotune_guard does nothing in this process", env_file)
        return
    carry_out(policy_from_settings(found, env_file=env_file))


def configure_logging(level: str) -> None:
    """autotune_guard logs to stderr through the ``autotune_guard`` logger, each line tagged with
    the rank; give that logger handlers of your own to send it elsewhere."""
    log = logging.getLogger("autotune_guard")
    log.setLevel(level)
    if not any(getattr(h, "autotune_guard", False) for h in log.handlers):
        handler = _Stderr()
        handler.autotune_guard = True
        handler.addFilter(_tag_rank)
        handler.setFormatter(logging.Formatter("autotune_guard[rank %(ag_rank)s] %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.propagate = False


class _Stderr(logging.StreamHandler):
    """sys.stderr as it is when a line is written, not as it was when the guard started: a test
    runner that captured stderr meanwhile closes its capture before the exit lines are written."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _tag_rank(record) -> bool:
    # The rank the evidence is filed under once the process has chosen (it outlives the group).
    facts = current().facts
    record.ag_rank = (facts.peek("rank_world") or facts.ask("rank_now", (0, 1)))[0]
    return True
