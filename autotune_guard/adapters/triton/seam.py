"""What the guard assumes about Triton's ``Autotuner``, in one place: its private fields (``nargs``,
``best_config``, ``configs_timings``, ``cache``), its frames (the run that called the pruning, the
frame that stored a winner), its cached launch path written out (``cached_run``), its run called
the ways the strategies need (under the autotuner's lock: ``held_run``; with ``configs`` swapped to
the chosen one: ``swap_run``; a tuning launch: ``tuning_launch``), the candidates after the kernel's
own pruning, its tuning key and Config defaults, and 3.8+'s autotuning listener. Every other module
reads an autotuner's fields and frames through this one (``cache_of``, ``configs_of``,
``caller_frame``, ...; ``scripts/house_metrics.py`` flags a read elsewhere). The registry's
``Capabilities`` (read once at the patch) choose between a release's variants. A failed launch
leaves the autotuner as it was.

Over 350 lines: all that is assumed of Triton's Autotuner from 3.3 on, in one file by design.
"""

from __future__ import annotations

import inspect
import sys

from ...core.model import OPTION_FIELDS, TuningKey, descriptor, signature
from ... import _patching
from . import wall_timer
from .registry import MISSING, registry


# --- the autotuner's fields: every other module reads them through these ------------------------

def cache_of(autotuner) -> dict:
    """Triton's cache of winners by tuning key (a library subclass may fill it itself)."""
    return autotuner.cache


def configs_of(autotuner) -> list:
    """Every declared candidate Config, in declaration order."""
    return autotuner.configs


def argument_names(autotuner) -> list:
    return autotuner.arg_names


def kernel_function(autotuner):
    """The Python function under the JIT function (``base_fn``), else the JIT function itself."""
    return getattr(autotuner, "base_fn", None) or autotuner.fn


def jit_function(autotuner):
    return autotuner.fn


def has_config_pre_hooks(autotuner) -> bool:
    """Whether a candidate Config carries a ``pre_hook`` (Triton's cached path then runs it)."""
    return any(c.pre_hook for c in autotuner.configs)


def caller_frame(depth: int = 1):
    """The frame ``depth`` calls above the caller of this function."""
    return sys._getframe(depth + 1)


def outer_frame(frame):
    return frame.f_back


def tuning_key(autotuner) -> TuningKey:
    """Triton's tuning key of ``autotuner`` (the 3.2+ formula, kept in the core's ``TuningKey``
    because Inductor's kernels are keyed by it too): its key arguments, then every dtype."""
    return TuningKey(autotuner.arg_names, autotuner.keys)


def config_defaults() -> dict:
    """Triton's own defaults for the launch options a table entry may omit (``Config.__init__``'s)."""
    import triton

    params = inspect.signature(triton.Config.__init__).parameters
    return {n: params[n].default for n in OPTION_FIELDS if n in params}


def held_run(autotuner, state, *args, **kwargs):
    """Triton's own run under the autotuner's lock (its ``nargs`` are shared by every thread and a
    pre_hook reads them). A failed launch leaves the autotuner as it was. acquire/release rather
    than ``with``: measurably cheaper per launch."""
    lock = state.lock
    lock.acquire()
    try:
        attrs = autotuner.__dict__
        saved = attrs.get("best_config", MISSING), attrs.get("nargs", MISSING)
        try:
            return registry().original_run(autotuner, *args, **kwargs)
        except BaseException:
            _restore_fields(autotuner, saved)
            _forget_failed_key(autotuner, state, args, kwargs)
            raise
    finally:
        lock.release()


def swap_run(autotuner, config, args, kwargs):
    """Launch ``config`` through Triton's single-config branch; the caller holds the lock."""
    saved_configs = autotuner.configs
    attrs = autotuner.__dict__
    saved = attrs.get("best_config", MISSING), attrs.get("nargs", MISSING)
    autotuner.configs = [config]
    try:
        return registry().original_run(autotuner, *args, **kwargs)
    except BaseException:
        _restore_fields(autotuner, saved)
        raise
    finally:
        autotuner.configs = saved_configs


def _restore_fields(autotuner, saved) -> None:
    """``best_config`` and ``nargs`` as they were (Triton's run sets both and clears ``nargs`` only
    when it completes)."""
    attrs = autotuner.__dict__
    for name, value in zip(("best_config", "nargs"), saved):
        if value is MISSING:
            attrs.pop(name, None)
        else:
            attrs[name] = value


def _forget_failed_key(autotuner, state, args, kwargs) -> None:
    """No cache entry for a key whose first launch failed (the choice stays: the next launch runs it)."""
    try:
        key = state.key.of(args, kwargs)
    except Exception:  # the arguments themselves were the problem
        return
    config = state.selected.get(key)
    if config is not None and autotuner.cache.get(key) is config:
        del autotuner.cache[key]
        state.seen.discard(key)


def candidates(autotuner, args, kwargs) -> list:
    """The live candidates after the kernel's own pruning (early_config_prune, perf_model/top_k);
    the caller holds the lock (pruning reads ``nargs``)."""
    if not (autotuner.early_config_prune or autotuner.perf_model):
        return list(autotuner.configs)
    saved = autotuner.__dict__.get("nargs")
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    try:
        prune = registry().original_prune or type(autotuner).prune_configs
        return list(prune(autotuner, kwargs))
    finally:
        autotuner.nargs = saved


def set_call_arguments(autotuner, args) -> None:
    """The call's arguments by name where pruning reads them, as an Autotuner-shaped run sets them
    (a library's copy of Triton's Autotuner, such as GPTQ's custom_autotune, keeps the same field)."""
    autotuner.nargs = dict(zip(autotuner.arg_names, args))


def tuning_launch(autotuner, key, args, kwargs, run=None):
    """A new key's tuning launch through Triton's run (or ``run``, a library's own): (its result,
    the winner Triton kept, its timings by signature when it timed here). The caller holds the lock:
    pinned launches of other keys swap ``configs``."""
    attrs = autotuner.__dict__
    timings_before = attrs.get("configs_timings")
    result = (run or registry().original_run)(autotuner, *args, **kwargs)
    winner = autotuner.cache.get(key, attrs.get("best_config")) if key is not None else attrs.get("best_config")
    return result, winner, measured(autotuner, attrs.get("configs_timings"), timings_before)


def own_timer(autotuner):
    """The kernel's own ``do_bench``, else None (3.4+ keeps the argument in ``_do_bench``; 3.3 sets
    ``do_bench`` in ``__init__``, the wall clock there where ``guarded.init`` gave it)."""
    attrs = autotuner.__dict__
    timer = attrs.get("do_bench") if registry().caps.init_needs_timer else attrs.get("_do_bench")
    return None if wall_timer.is_wall_clock(timer) else timer


def time_with(autotuner, timer) -> None:
    """``timer`` as the ``do_bench`` Triton's ``_bench`` calls (over 3.4+'s cached property)."""
    autotuner.__dict__["do_bench"] = timer


def can_time_one(autotuner) -> bool:
    """Whether one config can be timed on its own (Triton's ``Autotuner._bench``): split tuning."""
    return callable(getattr(autotuner, "_bench", None))


def time_configs(autotuner, configs, args, kwargs) -> list:
    """Each of ``configs`` timed on its own through Triton's ``_bench`` (its ``do_bench``, hooks and
    failures as a tuning launch has them): what the timer gave for each, median first, in ms
    (``[inf]``: it cannot run; tagged where the wall clock timed it). Nothing is launched for the
    caller; the reset hook runs afterwards as after Triton's own timing. The caller holds the lock."""
    attrs = autotuner.__dict__
    saved = attrs.get("nargs", MISSING)
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    try:
        found = [_floats(autotuner._bench(*args, config=c, **kwargs)) for c in configs]
        hook = getattr(autotuner, "pre_hook", None)
        if callable(hook):
            hook({**autotuner.nargs, **kwargs}, reset_only=True)
        return found
    finally:
        _restore_fields(autotuner, (attrs.get("best_config", MISSING), saved))


def timings_now(autotuner):
    """Triton's timings of its latest tuning launch (the object itself: a new one means it timed)."""
    return autotuner.__dict__.get("configs_timings")


def measured(autotuner, timings, timings_before) -> dict | None:
    """Triton's timings of the launch just made, by signature, if it timed in this process: it
    replaced ``configs_timings`` with one keyed by the live candidates."""
    if timings is None or timings is timings_before:
        return None
    live = {id(c) for c in autotuner.configs}
    if not all(id(c) in live for c in timings):
        return None
    return {signature(descriptor(c)): [float(t) for t in _as_list(v)] for c, v in timings.items()}


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _floats(value) -> list:
    floats = [float(v) for v in _as_list(value)]
    return wall_timer.WallTimings(floats) if wall_timer.timer_of(value) else floats


def cached_run(autotuner, state, decided, *args, **kwargs):
    """What Triton's run does for a key in its cache (3.3 through the newest tested alike), over
    ``decided`` (Triton's ``cache`` where the pin lives there, else the guard's ``state.selected``),
    except that the Config's pre_hook gets this call's own arguments instead of the ``nargs`` every
    thread rewrites. No lock: it reads nothing another launch rewrites. A key not decided yet goes
    to the autotuner's strategy."""
    config = decided.get(state.key.of(args, kwargs))
    if config is None:
        return state.strategy.run(autotuner, state, args, kwargs)
    settings = config.all_kwargs()
    if config.pre_hook is not None:
        config.pre_hook({**dict(zip(state.key.arg_names, args)), **kwargs, **settings})
    result = autotuner.fn.run(*args, **kwargs, **settings)
    autotuner.best_config = config
    return result


# --- how Triton chose a winner it stored --------------------------------------------------------

def how_stored(autotuner, config, frame) -> tuple:
    """(label, Triton's timings by signature or None) of a winner Triton is storing in ``cache``,
    read from the frame that stores it: its disk-cache reader, a timing (a ``timings`` dict over the
    candidates in that frame), or its run keeping the one config the kernel's pruning left (3.8+).
    Timings over the live candidates are Triton's own timing; over Configs rebuilt from JSON, its
    disk cache."""
    code = frame.f_code if frame is not None else None
    timings = frame.f_locals.get("timings") if frame is not None else None
    found = measured(autotuner, timings, None) if isinstance(timings, dict) and config in timings else None
    if found is not None:
        return "timed", found
    if (code is not None and code.co_name == "check_disk_cache") or isinstance(timings, dict):
        return "cache hit", None  # timings over Configs rebuilt from JSON: Triton's disk cache (3.4+)
    if code is not None and code is registry().original_run.__code__:
        return "pruned to one", None
    return "timed", None  # stored by code that is not Triton's tuning: a winner all the same


def timing_in(frame) -> tuple | None:
    """(Triton's timings by live candidate, in its order; the launch's args; its kwargs), read from
    the frame storing the winner (``benchmark`` from 3.4 on, ``run`` before); None elsewhere."""
    found = frame.f_locals if frame is not None else {}
    timings, args, kwargs = found.get("timings"), found.get("args"), found.get("kwargs")
    if isinstance(timings, dict) and isinstance(args, tuple) and isinstance(kwargs, dict):
        return timings, args, kwargs
    return None


def how_chosen(autotuner, key, heard, timings_before) -> tuple:
    """(label, Triton's timings by signature or None) for the entry the launch just made added;
    ``heard``: what Triton's listener said of it in this thread, if anything."""
    timings = timings_now(autotuner)
    if heard is not None and heard[0] == key and heard[2] is timings:  # Triton's listener said it
        if heard[1]:
            return "cache hit", None
        return "timed", measured(autotuner, heard[2], None)
    if timings is timings_before:
        # No timing and no disk-cache read, yet a new entry: Triton 3.8+ kept the one config the
        # kernel's pruning left.
        return "pruned to one", None
    found = measured(autotuner, timings, timings_before)
    # New timings over Configs rebuilt from JSON: Triton's disk cache (3.4+).
    return ("timed", found) if found is not None else ("cache hit", None)


# --- Triton 3.8+'s autotuning listener ------------------------------------------------------------

def chain_listener(interpreting: bool) -> None:
    """Ours first, then whatever listener was set before. Not under TRITON_INTERPRET=1, where
    Triton's call of any listener fails (it looks for a JITFunction the interpreter does not make)."""
    if not registry().caps.pins_through_pruning or interpreting:
        return
    knobs = autotuning_knobs()
    if knobs is None or knobs.listener is listener:
        return
    registry().user_listener = knobs.listener
    stale = _patching.patched(knobs, "listener")
    if stale is not None:  # the program set a listener of its own over ours since: ours goes first again
        stale.forget()
    _patching.patch(knobs, "listener", listener)


def autotuning_knobs():
    try:
        from triton import knobs
    except ImportError:
        return None
    autotuning = getattr(knobs, "autotuning", None)
    return autotuning if autotuning is not None and hasattr(autotuning, "listener") else None


def listener(*, fn, key, best_config, configs_timings, duration, cache_hit, **more):
    """What Triton says about a choice it just made; passed on to the listener that was there."""
    registry().heard.value = (key, bool(cache_hit), configs_timings)
    if registry().user_listener is not None:
        registry().user_listener(fn=fn, key=key, best_config=best_config, configs_timings=configs_timings,
                                duration=duration, cache_hit=cache_hit, **more)


def tell_listener(autotuner, key, config) -> None:
    """A choice the guard made (Triton calls no listener for it): the user's listener hears it as
    Triton's disk-cache hits are told, untimed (``cache_hit=True``, no timings)."""
    if not registry().caps.pins_through_pruning:
        return
    knobs = autotuning_knobs()
    told = None if knobs is None else knobs.listener
    if told is listener:
        told = registry().user_listener
    if told is None:
        return
    fn = autotuner.fn
    while type(fn).__name__ != "JITFunction" and hasattr(getattr(fn, "fn", None), "fn"):
        fn = fn.fn
    told(fn=fn, key=key, best_config=config, configs_timings={}, duration=None, cache_hit=True)


# --- the pruning of a new key (3.8+: Triton's run calls ``prune_configs``) -------------------------

def pruned(autotuner, frame, kwargs) -> tuple:
    """(the tuning key of the Triton run that called the pruning, or None; the candidates the
    kernel's own pruning leaves). The pruning functions see that call's own arguments even when
    other threads launch the autotuner meanwhile (and rewrite ``nargs``)."""
    call = _tritons_call(frame)
    prune = registry().original_prune
    if call is not None and (autotuner.early_config_prune or autotuner.perf_model):
        return call[0], prune(_OwnArguments(autotuner, dict(zip(autotuner.arg_names, call[1]))), kwargs)
    return (call[0] if call is not None else None), prune(autotuner, kwargs)


def shared_arguments(autotuner) -> dict:
    """The arguments of the autotuner's latest launch, as Triton keeps them for every thread."""
    return autotuner.__dict__.get("nargs") or {}


def _tritons_call(frame):
    """(the tuning key, the positional arguments) of the call of Triton's run that called the
    pruning (its locals ``key`` and ``args``), or None when pruning was called from elsewhere. Read
    from Triton's own frame because a kernel launched directly (no guard frame on the steady path)
    meets its new keys here, and ``nargs`` may be another thread's by now."""
    if frame is not None and frame.f_code is registry().original_run.__code__:
        local = frame.f_locals
        key, args = local.get("key"), local.get("args")
        if isinstance(key, tuple) and isinstance(args, tuple):
            return key, args
    return None


class _OwnArguments:
    """The autotuner as the kernel's pruning functions see it at a new key's first launch: its
    ``nargs`` are this call's arguments; every other attribute is the autotuner's."""

    def __init__(self, autotuner, nargs):
        self.__dict__["_autotuner"] = autotuner
        self.__dict__["nargs"] = nargs

    def __getattr__(self, name):
        return getattr(self.__dict__["_autotuner"], name)


# --- frames of any code (the timer's callers) -------------------------------------------------------

def frame_locals(frame) -> dict:
    """A frame's local names (a snapshot on 3.12 and older, a proxy on 3.13+: read, never written)."""
    return frame.f_locals


def frame_module(frame) -> str:
    """The name of the module whose code a frame runs ('' where it has none)."""
    return str(frame.f_globals.get("__name__", ""))


def frame_function(frame) -> str:
    """The name of the function a frame runs."""
    return frame.f_code.co_name
