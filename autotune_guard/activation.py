"""Activation: the post-import hooks, carrying out a policy across the adapters (the ``install()``
of the API, and the environment's policy at Triton's import), and how an error nobody catches is
shown once the guard is active.

Post-import hooks go through the Guard's one registry (``guard.when_imported``); this module gives
it wrapt's ``register_post_import_hook`` as the registrar (the runtime does not import wrapt).

A bad setting fails ``import triton`` from inside Triton's and wrapt's import machinery: Python's
own report is a wall of frames that are not the user's, with the one line that matters at the
bottom (four times over under a 2-rank torchrun). An uncaught error the guard raised at activation
is shown as that one line and what to do next; an on-purpose refusal (``AUTOTUNE_ON_MISS=error``)
as a few lines naming every key refused and the fix; ``AUTOTUNE_TRACEBACK=1`` shows the frames as
usual. A program that catches the exception gets it whole: only the uncaught report changes.
Triton's ``0 active drivers`` (no GPU, no ``TRITON_INTERPRET=1``) is shown as the guard's hint, one
block. Every other exception goes to the hook the program had. The report
is made through the process's one ``sys.excepthook`` wrapper, ``evidence.signals.ExceptHook``.

Over 350 lines: every adapter's hook is wired here, so that one file shows what a policy touches.
"""

from __future__ import annotations

import logging
import os
import sys

from . import _watch, evidence
from .adapters import distributed, redis_tables, torch_flags
from .adapters import triton as triton_adapter
from .core import settings, switches
from .core.errors import ActivationError, GuardError, SelectionError
from .core.settings import AutotunePolicy, policy_from_settings
from .core.terminal import visible
from .evidence import signals as evidence_signals, table_growth
from .runtime import current

logger = logging.getLogger("autotune_guard")

AUTOTUNER = "triton.runtime.autotuner"
INDUCTOR_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
HELION = "helion.runtime.kernel"  # Helion's BoundKernel (adapters/helion.py)


def _wrapt_registrar(module: str, hook) -> None:
    """The Guard's registrar of post-import hooks: wrapt's (imported at the first registration)."""
    import wrapt

    wrapt.register_post_import_hook(hook, module)


# Whatever waits in the Guard's registry (an adapter's hook registered before activation) goes to wrapt.
current().import_registrar(_wrapt_registrar)


def arm() -> None:
    """Register the post-import hooks (each fires at once for a module imported already); the
    Guard's registry registers each once, however often this runs."""
    try:
        import wrapt  # noqa: F401  (its absence is named here, before any hook is needed)
    except Exception as exc:
        raise ActivationError(f"autotune_guard is active (an AUTOTUNE_* variable is set) but its dependency wrapt "
                              f"cannot be imported ({exc!r}); reinstall autotune-guard, or set AUTOTUNE_DISABLE=1 to "
                              "run unguarded", dependency="wrapt") from exc
    guard = current()
    guard.when_imported(AUTOTUNER, _on_autotuner)
    guard.when_imported("torch.distributed", _on_distributed)
    guard.when_imported(INDUCTOR_HEURISTICS, _on_inductor)
    guard.when_imported("triton.testing", triton_adapter.watch_timers)
    guard.when_imported(HELION, _on_helion)


def _on_autotuner(module) -> None:
    _watch.unwatch()
    try:
        on_triton_import(module)
    except BaseException as exc:
        # The failed import is rolled back and wrapt has dropped this hook (the registry registers
        # it again at the next arm()): watch again, so that retrying ``import triton`` fails the
        # same way instead of running unguarded.
        _watch.watch(arm)
        mark_activation_error(exc)
        raise


def _inductor_flag(name: str, variable: str) -> bool:
    """Inductor's determinism config ``name`` for the derived mode (its adapter, loaded at need)."""
    from .adapters.inductor import flags

    return flags.flag(name, variable)


def _on_distributed(module) -> None:
    distributed.wrap_barriers(module)


def _on_inductor(module) -> None:
    from .adapters import inductor

    inductor.patch(module)


def _on_helion(module) -> None:
    from .adapters import helion  # noqa: F401  (its family registers at import)

    _on_family_module(module)


def _on_family_module(module) -> None:
    """Each module family that patches ``module`` installs; a third-party one that fails is named
    and disabled, and the program goes on."""
    from .deciding import families

    for family in families.installers(module.__name__):
        try:
            family.install(module)
        except Exception as exc:
            if not families.third_party(family):
                raise
            families.disable(family, f"its install({module.__name__}) raised {exc!r}")


def _hook_module_families(guard) -> None:
    """The modules third-party module families patch, hooked as Helion's is (at once where imported)."""
    from .deciding import families

    for name in families.modules():
        if name != HELION:
            guard.when_imported(name, _on_family_module)


def carry_out(guard, policy: AutotunePolicy) -> None:
    if policy.record_path:
        evidence.check_writable(policy.record_path, "AUTOTUNE_RECORD_PATH")
    if policy.digest_path:
        evidence.check_writable(policy.digest_path, "AUTOTUNE_DIGEST_PATH")
    # Logging and the rank first: a table store found down below is said on a line tagged with the rank.
    distributed.provide_facts(guard)
    configure_logging(policy.log_level)
    redis_tables.configure(guard, policy)  # a table store that does not answer fails here (or is left out)
    table_growth.configure(guard, policy)  # a table directory it cannot write fails here, before anything changes
    module = triton_adapter.loaded_module()
    if module is not None:
        triton_adapter.patch(module)  # raises before changing anything if it cannot
    else:
        arm()
    torch_flags.provide_facts(guard, inductor_flag=_inductor_flag)
    guard.replace(policy)
    evidence.configure(policy)
    distributed.on_install(policy)
    # The Inductor patch for a policy installed by the API: at once if Inductor is loaded.
    guard.when_imported(INDUCTOR_HEURISTICS, _on_inductor)
    guard.when_imported(HELION, _on_helion)
    _hook_module_families(guard)
    install_excepthook(policy.mode)
    _started_with(policy, guard)


def _started_with(policy: AutotunePolicy, guard) -> None:
    """Say what is in force and why, and name what cannot take effect."""
    level = logging.DEBUG if policy.mode_from == settings.DERIVED else logging.INFO  # an explicit mode is named too
    logger.log(level, "mode %s, from %s", policy.mode, policy.mode_from)
    evidence.say_files(policy)
    logger.debug("installed policy: %s", settings.describe(policy))
    if policy.foreign:
        logger.info("not autotune_guard settings, left to their tools: %s", ", ".join(policy.foreign))
    if policy.env_file_note:
        logger.warning("%s", policy.env_file_note)
    if policy.table_dir_made:  # a typo would start a table of its own: said, not silent
        logger.warning("AUTOTUNE_TABLE_PATH: made the table folder %s, which did not exist: this run tunes every key "
                       "and writes <arch>.json there", policy.table_dir_made)
    found = switches.in_force(os.environ)
    if found:  # said whatever the log level asks: each decides what a library times or reads
        logger.warning("%s", switches.startup_line(found, policy.mode, policy.mode_from, settings.DERIVED))
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
    carry_out(guard, policy_from_settings(found, env_file=env_file))


def configure_logging(level: str) -> None:
    """autotune_guard logs to stderr through the ``autotune_guard`` logger, each line tagged with
    the rank; give that logger handlers of your own to send it elsewhere."""
    log = logging.getLogger("autotune_guard")
    log.setLevel(level)
    if not any(getattr(h, "autotune_guard", False) for h in log.handlers):
        handler = _Stderr()
        handler.autotune_guard = True
        handler.addFilter(_tag_rank)
        handler.setFormatter(_Visible("autotune_guard[rank %(ag_rank)s] %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.propagate = False


class _Visible(logging.Formatter):
    """Lines whose terminal control characters are escaped (``core.terminal``, the report's rule):
    kernel names and keys come from modules, files and stores others write."""

    def format(self, record) -> str:
        return visible(super().format(record))


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


# --- how an uncaught error is shown -----------------------------------------------------------

TRACEBACK_VARIABLE = "AUTOTUNE_TRACEBACK"
_MARK = "_autotune_guard_at_activation"


def mark_activation_error(exc: BaseException) -> None:
    """``exc`` failed the guard's activation: shown short if nobody catches it, when it is the
    guard's own verdict on a setting (a GuardError, or an OSError naming an ``AUTOTUNE_*`` path)."""
    if isinstance(exc, GuardError) or (isinstance(exc, OSError) and str(exc).startswith("AUTOTUNE_")):
        try:
            setattr(exc, _MARK, True)
        except Exception:  # an exception type that refuses attributes keeps Python's report
            return
        install_excepthook()


class _ShortGuardErrors:
    """The report of the ``sys.excepthook`` wrapper (``ExceptHook.report``); ``previous`` is the
    hook the program had."""

    def __init__(self):
        self.mode = None  # the mode in force, for the hint on a timing failure

    def __call__(self, previous, kind, value, tb):
        if getattr(value, _MARK, False) and not _traceback_wanted():
            # Python's own report goes to stderr too; this replaces it (the logger may not be set up yet).
            sys.stderr.write(f"autotune_guard: error: {visible(str(value))}\n"
                             f"  (Triton was being imported; {TRACEBACK_VARIABLE}=1 shows the traceback)\n")
            return
        refusal = _refusal_in(value)
        if refusal is not None and not _traceback_wanted():
            try:
                lines = refusal_lines(refusal)
            except Exception:  # never hide the error behind one of ours
                lines = None
            if lines:
                sys.stderr.write("".join(visible(line) + "\n" for line in lines))
                return
        hint = no_driver_hint(value, self.mode)
        if hint and not _traceback_wanted():  # explained: one block instead of Triton's frames
            sys.stderr.write(f"autotune_guard: error: {visible(hint)}\n  ({TRACEBACK_VARIABLE}=1 shows the traceback)\n")
            return
        previous(kind, value, tb)


def _refusal_in(exc: BaseException | None):
    """The guard's own refusal (a SelectionError: AUTOTUNE_ON_MISS=error and the like) that is
    ``exc`` or its cause (a wrapper such as Inductor's may carry it), else None."""
    for _ in range(8):
        if exc is None or isinstance(exc, SelectionError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


MAX_KEYS = 5  # keys named one a line; a refusal's report stays within 10 lines a rank


def refusal_lines(refusal: BaseException) -> list[str]:
    """A refusal as a few lines tagged with the rank: what was refused, every key this process
    refused, why the tables did not serve the last one, the fix, and how to see the traceback."""
    from .core.misses import fix_hint, miss_reasons

    guard = current()
    epoch, tag = guard.epoch, f"autotune_guard[rank {_rank(guard)}]"
    refused, policy = list(epoch.refused), epoch.settled_policy()
    lines = [f"refused: {str(refusal).removeprefix('autotune_guard: ')}"]
    if len(refused) > 1:
        lines.append(f"every key refused in this process ({len(refused)}):")
        lines += [f"  {key.what()}" for key in refused[:MAX_KEYS]]
        lines += [f"  ... and {len(refused) - MAX_KEYS} more"] if len(refused) > MAX_KEYS else []
    if refused and policy is not None:
        last = refused[-1]
        lines.append(f"tables: {'; '.join(miss_reasons(policy.table_path, last.arch, last.kernel, last.key, guard.stores_down()))}")
        lines.append(f"fix: {fix_hint(policy.table_path, last.arch)}")
        lines.append("every key the job lacks, in one run: AUTOTUNE_ON_MISS=error_at_exit")
    lines.append(f"({TRACEBACK_VARIABLE}=1 shows the traceback)")
    return [f"{tag} {line}" for line in lines]


def _rank(guard) -> str:
    try:
        return str(guard.facts.get("rank_world")[0])
    except Exception:  # no rank source: the launcher's variable
        return os.environ.get("RANK", "0")


def _traceback_wanted() -> bool:
    return os.environ.get(TRACEBACK_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def no_driver_hint(exc: BaseException, mode: str | None) -> str | None:
    """What to do when a guarded program met Triton's ``0 active drivers`` (no GPU), else None."""
    if mode is None or not isinstance(exc, RuntimeError) or "active drivers" not in str(exc):
        return None
    pinned = "" if mode == "pinned" else "; AUTOTUNE_MODE=pinned chooses configs without timing"
    return (f"Triton found no GPU driver to run the kernels on ({exc})\n  without a GPU, TRITON_INTERPRET=1 runs "
            f"them on the CPU, where the timing modes time candidate configs with the wall clock{pinned}")


def install_excepthook(mode: str | None = None) -> None:
    """The short report on the process's one ``sys.excepthook`` wrapper (put there once; it chains
    to the hook the program had)."""
    hook = evidence_signals.wrap_excepthook()
    if not isinstance(hook.report, _ShortGuardErrors):
        hook.report = _ShortGuardErrors()
    if mode is not None:
        hook.report.mode = mode
