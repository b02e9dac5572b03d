"""Config choices the guard does not govern, found where they show.

* Autotuners of a library's own built on ``triton.KernelInterface`` rather than Triton's
  ``Autotuner`` (GPTQ-triton's ``custom_autotune``, forks of Triton's autotuner): named at their
  first launch under a policy, so that a CPU run sees them too.
* Calls of Triton's timer (``triton.testing.do_bench``, ``do_bench_cudagraph``; the driver's
  benchmarker is the former) that come from no autotuner the guard governs: attributed at the call
  by looking at the callers' frames. Only the timer pays for that, and it is slow anyway.

Each is named once per kernel, counted as not governed in the exit line and the evidence, and
refused in pinned mode with ``AUTOTUNE_ON_MISS=error``.
"""

from __future__ import annotations

import functools
import logging
from types import FunctionType

from ...core.errors import SelectionError
from ...core.model import qualified_name
from ...runtime import current
from ... import _patching
from . import families
from .registry import registry
from .seam import caller_frame, frame_function, frame_locals, frame_module, outer_frame
from .tuner import STATE_ATTR, TunerState

logger = logging.getLogger("autotune_guard")

PROBED_ATTR = "_autotune_guard_foreign_probed"
TIMERS = ("do_bench", "do_bench_cudagraph")
_FRAMES = 64  # how far up the callers of a timer are looked at


def watch_subclasses(jit_module, config_class, triton_classes: tuple) -> None:
    """Wrap the ``run`` of every ``KernelInterface`` subclass that is not Triton's own, those
    defined already and those defined later (through ``__init_subclass__``)."""
    base = jit_module.KernelInterface
    registry().config_class = config_class
    registry().triton_classes = triton_classes
    if _patching.patched(base, "__init_subclass__") is not None:
        return
    todo = list(base.__subclasses__())
    while todo:
        sub = todo.pop()
        todo.extend(sub.__subclasses__())
        _wrap_if_foreign(sub)

    def __init_subclass__(cls, **kwargs):
        super(base, cls).__init_subclass__(**kwargs)
        _wrap_if_foreign(cls)

    _patching.patch(base, "__init_subclass__", classmethod(__init_subclass__))


def _wrap_if_foreign(cls) -> None:
    original = cls.__dict__.get("run")
    if original is None or not callable(original) or getattr(original, "_autotune_guard", False):
        return
    if issubclass(cls, registry().triton_classes) or cls.__module__.split(".")[0] in ("triton", "torch"):
        return  # Triton's and torch's own classes: never a family's, however greedy its shaped
    family = families.family_of(cls)
    if family is not None:  # a registered library family governs its own autotuner class
        families.govern(cls, original, family)
        return

    @functools.wraps(original)
    def run(self, *args, **kwargs):
        guard = current()
        epoch = guard.epoch
        if epoch.installed is not None and self.__dict__.get(PROBED_ATTR) != epoch.generation:
            self.__dict__[PROBED_ATTR] = epoch.generation
            _first_launch(guard, self, epoch.settled_policy())
        return original(self, *args, **kwargs)

    run._autotune_guard = True
    _patching.patch(cls, "run", run)


def _first_launch(guard, autotuner, policy) -> None:
    configs = candidates(autotuner)
    if len(configs) < 2:
        return
    kind, kernel = _names_of(autotuner)
    message = (f"kernel {kernel}: its autotuner {kind} is a triton.KernelInterface of its own, not Triton's Autotuner, "
               f"and chooses among {len(configs)} configs itself; autotune_guard ({policy.mode} mode) neither sees "
               "nor governs that choice, and it is not in the choice log")
    name_ungoverned(guard, kernel, f"{kind} chooses its configs itself", message, policy)


def name_ungoverned(guard, kernel: str, why: str, message: str, policy) -> None:
    """Count ``kernel`` as not governed and say so once; refused in pinned mode with on_miss=error."""
    if not policy.in_scope(kernel):  # left to its own tuning by AUTOTUNE_MODULES/CONFIG_INVARIANT
        return
    if policy.mode == "pinned" and policy.on_miss == "error":
        raise SelectionError(f"autotune_guard: {message}; refused with AUTOTUNE_ON_MISS=error")
    guard.note_ungoverned(kernel, why)
    guard.warn_once(f"ungoverned {kernel}", message)


def candidates(owner) -> list:
    """The ``triton.Config`` candidates an object holds in ``configs``."""
    configs = getattr(owner, "configs", None)
    if not isinstance(configs, (list, tuple)):
        return []
    return [c for c in configs if isinstance(c, registry().config_class)]


def kernel_of(owner) -> str | None:
    """``module.function`` of the kernel an autotuner-like object launches (through ``fn`` chains)."""
    fn, kernel = getattr(owner, "fn", None), None
    for _ in range(8):
        if fn is None:
            break
        if isinstance(fn, FunctionType):  # the Python function under the JIT (or interpreter) wrapper
            return qualified_name(fn)
        if kernel is None and getattr(fn, "arg_names", None) is not None:
            kernel = fn
        fn = getattr(fn, "fn", None)
    return qualified_name(kernel) if kernel is not None else None


# --- the timer ---------------------------------------------------------------------------------


def watch_timers(testing_module) -> None:
    """Put the sentinel on ``triton.testing``'s timers (once)."""
    for name in TIMERS:
        original = getattr(testing_module, name, None)
        if callable(original) and _patching.patched(testing_module, name) is None:
            _patching.patch(testing_module, name, _sentinel(original, f"{testing_module.__name__}.{name}"))


def _sentinel(original, timer: str):
    @functools.wraps(original)
    def sentinel(*args, **kwargs):
        guard = current()
        epoch = guard.epoch
        if epoch.installed is not None:
            attribute(guard, caller_frame(), timer, epoch.settled_policy())
        return original(*args, **kwargs)

    sentinel._autotune_guard = True
    return sentinel


# Frames of code that accounts for the timing it runs: the guard's own timing passes (Triton's
# guarded run; a governed library family's run, ``families.govern``, which notes its tuner's
# timing itself; Inductor's step and benchmark, whose re-tuners it names itself).
ACCOUNTED = ("autotune_guard.adapters.triton.guarded", "autotune_guard.adapters.triton.families",
             "autotune_guard.adapters.inductor.")
TEMPLATE_SELECTION = "torch._inductor.select_algorithm"


def attribute(guard, frame, timer: str, policy) -> None:
    """Who called the timer: nothing to say for a timing the guard runs or accounts for, else the
    autotuner-like object or the frame holding the candidates, else the plain caller."""
    frames = []
    while frame is not None and len(frames) < _FRAMES:
        module = frame_module(frame)
        if module.startswith(ACCOUNTED) or _governed_autotuner(frame_locals(frame).get("self")):
            return
        frames.append((frame, module))
        frame = outer_frame(frame)
    if any(module == TEMPLATE_SELECTION for _, module in frames):
        return _name_template_selection(guard, frames, timer, policy)
    for frame, module in frames:
        names = frame_locals(frame)
        owner = names.get("self")
        if owner is not None and len(candidates(owner)) >= 2:
            return _name_tuner(guard, owner, frame, timer, policy)
        held = [v for v in names.values() if isinstance(v, (list, tuple)) and len(v) >= 2
                and all(isinstance(c, registry().config_class) for c in v)]
        if held:
            return _name_function(guard, frame, timer, policy, len(held[0]))
    caller = next((f for f, module in frames if not module.startswith(("triton.", "autotune_guard"))), None)
    if caller is not None:
        where = _where(caller)
        guard.warn_once(f"timer {where}", f"{timer} called from {where}, outside any autotuner: a measurement, "
                        "not a config choice; autotune_guard leaves it alone", level=logging.INFO)


def _governed_autotuner(owner) -> bool:
    if owner is None or registry().autotuner_class is None or not isinstance(owner, registry().autotuner_class):
        return False
    state = owner.__dict__.get(STATE_ATTR)
    return isinstance(state, TunerState) and state.is_current()


def _name_template_selection(guard, frames, timer, policy) -> None:
    op = next((frame_locals(f).get("name") for f, module in frames if module == TEMPLATE_SELECTION
               and isinstance(frame_locals(f).get("name"), str)), "?")
    kernel = f"torch.compile template selection:{op}"
    message = (f"{kernel}: Inductor's max-autotune template selection times its choices with {timer}; autotune_guard "
               f"({policy.mode} mode) does not govern that choice, and it is not in the choice log")
    name_ungoverned(guard, kernel, "Inductor's template selection (select_algorithm) times its choices", message,
                    policy)


def _names_of(owner) -> tuple[str, str]:
    """The autotuner-like object's class and the kernel it launches (its class where unknown)."""
    kind = f"{type(owner).__module__}.{type(owner).__qualname__}"
    return kind, kernel_of(owner) or kind


def _name_tuner(guard, owner, frame, timer, policy) -> None:
    kind, kernel = _names_of(owner)
    message = (f"kernel {kernel}: {kind} times its {len(candidates(owner))} configs with {timer} (called from "
               f"{_where(frame)}) and chooses among them itself; autotune_guard ({policy.mode} mode) does not govern "
               "that choice, and it is not in the choice log")
    name_ungoverned(guard, kernel, f"{kind} times its configs with {timer}", message, policy)


def _name_function(guard, frame, timer, policy, count) -> None:
    where = _where(frame)
    message = (f"{where} times {count} triton.Config candidates with {timer} and chooses among them itself; "
               f"autotune_guard ({policy.mode} mode) does not govern that choice, and it is not in the choice log")
    name_ungoverned(guard, where, f"times configs with {timer}", message, policy)


def _where(frame) -> str:
    owner = frame_locals(frame).get("self")
    name = f"{type(owner).__qualname__}.{frame_function(frame)}" if owner is not None else frame_function(frame)
    return f"{frame_module(frame) or '?'}.{name}"
