"""Carrying out the installed policy against Triton's ``Autotuner``.

The only module that touches Triton internals.  It replaces ``Autotuner.run`` in place (seen
through every alias: ``triton.autotune``, ``triton.runtime.Autotuner``) with ``_guarded_run``:

* pinned: the tuning key is computed exactly as Triton 3.2+ computes it; the first launch of a
  key selects a candidate (``selection.select``) after the kernel's own pruning, later launches
  find it in a dict.  The launch runs through Triton's single-config branch (``configs`` is
  swapped to ``[chosen]`` for the call and restored after it), which in every supported release
  neither times nor touches ``cache``, so pinning can never fall back to timing.
* auto and record: Triton runs untouched; a new ``cache`` entry after the call is its timed
  winner, which is logged (and recorded with the timings Triton measured in this process).
* consensus: see ``_consensus_launch``.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from functools import cached_property

from . import evidence, files, selection
from .policy import AutotunePolicy

logger = logging.getLogger("autotune_guard")

MIN_TRITON = (3, 3)
NEWEST_TESTED_TRITON = (3, 9)  # the newest release the suite runs against; a newer one warns once
_STATE_ATTR = "_autotune_guard_state"
_MISSING = object()

_policy: AutotunePolicy | None = None
_generation = 0  # bumped by every install(); per-autotuner state of an older one is rebuilt
_original_run = None
_original_init = None
_arch_name: str | None = None
_tables: dict[str, dict] = {}  # arch -> {kernel: {key: entry}}
_config_defaults: dict | None = None
_warned: set[str] = set()
_warned_newer = False


# --- installing ---------------------------------------------------------------------------------

def apply(policy: AutotunePolicy, autotuner_module) -> None:
    """Patch ``autotuner_module.Autotuner`` (once) and make ``policy`` the one carried out."""
    global _policy, _generation, _tables
    patch(autotuner_module)
    _policy = policy
    _tables = {}
    _warned.clear()
    _generation += 1


def set_pending(policy: AutotunePolicy) -> None:
    """The policy to carry out once Triton is imported."""
    global _policy, _generation
    _policy = policy
    _generation += 1


def patch(autotuner_module) -> None:
    global _original_run, _original_init
    cls = getattr(autotuner_module, "Autotuner", None)
    check_supported(autotuner_module)
    if getattr(cls.run, "_autotune_guard", False):
        return
    _original_run = cls.run
    cls.run = _guarded_run
    # Triton 3.3 resolves its default timer in __init__, which under TRITON_INTERPRET=1 on a
    # CPU-only machine fails at decoration ("0 active drivers") even for kernels we pin.
    if not isinstance(inspect.getattr_static(cls, "do_bench", None), cached_property):
        _original_init = cls.__init__
        cls.__init__ = _guarded_init


def check_supported(autotuner_module) -> None:
    global _warned_newer
    import triton

    version = getattr(triton, "__version__", "0")
    numbers = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    cls = getattr(autotuner_module, "Autotuner", None)
    if numbers < MIN_TRITON or cls is None or not all(hasattr(cls, n) for n in ("run", "prune_configs")):
        raise RuntimeError(
            f"autotune_guard supports Triton {MIN_TRITON[0]}.{MIN_TRITON[1]} and newer; this is Triton {version}. "
            "Set AUTOTUNE_DISABLE=1 to run unguarded."
        )
    if numbers > NEWEST_TESTED_TRITON and not _warned_newer:
        # Still guarded: the patch checks the methods it needs above; a newer release may change
        # what they do, so the user hears it once per process.
        _warned_newer = True
        newest = ".".join(map(str, NEWEST_TESTED_TRITON))
        logger.warning("Triton %s is newer than %s, the newest release autotune_guard is tested with; "
                       "it is guarded all the same (AUTOTUNE_DISABLE=1 runs unguarded)", version, newest)


def _guarded_init(self, *args, **kwargs):
    if kwargs.get("do_bench") is None and _interpreting():
        kwargs["do_bench"] = _no_timer_under_interpreter
    _original_init(self, *args, **kwargs)


def _no_timer_under_interpreter(kernel_call, quantiles):
    raise RuntimeError("Triton's default timer needs a GPU driver; under TRITON_INTERPRET=1 give the kernel "
                       "do_bench=..., or pin it with AUTOTUNE_MODE=pinned")


_guarded_init._autotune_guard = True


# --- the launch path ----------------------------------------------------------------------------

class _State:
    """What one autotuner needs on its launch path under the current policy."""

    __slots__ = ("generation", "qualified", "mode", "arg_names", "arg_set", "keys", "key_index", "selected", "seen",
                 "lock")

    def __init__(self, autotuner, policy: AutotunePolicy):
        fn = getattr(autotuner, "base_fn", None) or autotuner.fn
        self.generation = _generation
        self.qualified = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"
        self.mode = policy.mode if policy.in_scope(self.qualified) else "off"
        self.arg_names = list(autotuner.arg_names)
        self.arg_set = frozenset(self.arg_names)
        self.keys = list(autotuner.keys)
        # Positions of the key arguments, for the tuning key of an all-positional call.
        self.key_index = tuple(self.arg_names.index(name) for name in self.keys if name in self.arg_set)
        self.selected: dict = {}  # tuning key -> live Config
        self.seen: set = set()  # tuning keys whose timed winner was observed
        self.lock = threading.RLock()
        if policy.enumerate and len(autotuner.configs) > 1:
            how = {"off": "left to Triton (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(self.mode, "timed")
            logger.info("autotuner %s: %d candidates, %s", self.qualified, len(autotuner.configs), how)


_state_lock = threading.Lock()


def _new_state(autotuner) -> _State:
    """The autotuner's state under the current policy, built once: two threads meeting its first
    launch must share one state, hence one lock around the ``configs`` swap."""
    with _state_lock:
        state = autotuner.__dict__.get(_STATE_ATTR)
        if state is None or state.generation != _generation:
            state = _State(autotuner, _policy)
            setattr(autotuner, _STATE_ATTR, state)
            if state.mode in ("auto", "record") and autotuner.cache:
                # Winners Triton chose before this policy was installed belong in its log too.
                _observe(autotuner, state, autotuner.__dict__.get("configs_timings"))
        return state


def _guarded_run(self, *args, **kwargs):
    state = self.__dict__.get(_STATE_ATTR)
    if state is None or state.generation != _generation:
        if _policy is None:
            return _original_run(self, *args, **kwargs)
        state = _new_state(self)
    mode = state.mode
    if mode == "pinned" or mode == "consensus":
        # The steady state, inlined (it is every launch): under the lock, because another
        # thread's pinned launch swaps ``configs`` to one element for the length of its call.
        # acquire/release rather than ``with``: measurably cheaper per launch.
        lock = state.lock
        lock.acquire()
        try:
            saved = self.configs
            if len(saved) < 2:
                return _original_run(self, *args, **kwargs)
            key = _tuning_key(state, args, kwargs)
            config = state.selected.get(key)
            if config is None and mode == "pinned":
                config = _pinned_choice(self, state, key, args, kwargs)
            if config is not None:
                attrs = self.__dict__
                best, nargs = attrs.get("best_config", _MISSING), attrs.get("nargs", _MISSING)
                self.configs = [config]
                try:
                    return _original_run(self, *args, **kwargs)
                except BaseException:
                    _restore(attrs, best, nargs)
                    raise
                finally:
                    self.configs = saved
        finally:
            lock.release()
        # A key consensus has not decided yet: outside this lock, which the decision takes after its own.
        return _consensus_launch(self, state, key, args, kwargs)
    if mode == "off":
        return _original_run(self, *args, **kwargs)
    # auto / record: Triton times; a new cache entry is its winner (a single-config autotuner
    # never adds one, so it needs no test of its own here).
    cache = self.cache
    before = len(cache)
    timings = self.__dict__.get("configs_timings")
    result = _original_run(self, *args, **kwargs)
    if len(cache) != before:
        _observe(self, state, timings)
    return result


_guarded_run._autotune_guard = True


def _run_pinned(autotuner, state, config, args, kwargs):
    """Launch ``config`` through Triton's single-config branch (``_guarded_run`` inlines this)."""
    with state.lock:  # configs is shared by every thread launching this autotuner
        saved = autotuner.configs
        attrs = autotuner.__dict__
        best, nargs = attrs.get("best_config", _MISSING), attrs.get("nargs", _MISSING)
        autotuner.configs = [config]
        try:
            return _original_run(autotuner, *args, **kwargs)
        except BaseException:
            _restore(attrs, best, nargs)
            raise
        finally:
            autotuner.configs = saved


def _restore(attrs, best, nargs) -> None:
    """After a failed launch: ``best_config`` and ``nargs`` as they were (Triton's run sets
    both and clears ``nargs`` only when it completes)."""
    for name, value in (("best_config", best), ("nargs", nargs)):
        if value is _MISSING:
            attrs.pop(name, None)
        else:
            attrs[name] = value


def _tuning_key(state, args, kwargs) -> tuple:
    """Triton's own tuning key (3.2+ formula): key arguments by name, then every dtype."""
    if len(args) <= len(state.arg_names) and state.arg_set.isdisjoint(kwargs):
        # Every kernel argument positional (the usual ``kernel[grid](...)``): no name mapping,
        # one attribute read per argument.
        count = len(args)
        key = [args[i] for i in state.key_index if i < count]
        for value in args:
            dtype = getattr(value, "dtype", _MISSING)
            if dtype is not _MISSING:
                key.append(str(dtype))
        return tuple(key)
    nargs = dict(zip(state.arg_names, args))
    if kwargs:
        arg_set = state.arg_set
        for name, value in kwargs.items():
            if name in arg_set:
                nargs[name] = value
    key = [nargs[name] for name in state.keys if name in nargs]
    key += [str(value.dtype) for value in nargs.values() if hasattr(value, "dtype")]
    return tuple(key)


def key_text(key: tuple) -> str:
    """The tuning key as tables and logs spell it: ``1024,torch.float16``."""
    return ",".join(str(part) for part in key)


def _candidates(autotuner, args, kwargs) -> list:
    """The live candidates after the kernel's own pruning (early_config_prune, perf_model/top_k)."""
    if not (autotuner.early_config_prune or autotuner.perf_model):
        return list(autotuner.configs)
    saved = autotuner.__dict__.get("nargs")
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    try:
        return list(autotuner.prune_configs(kwargs))
    finally:
        autotuner.nargs = saved


def _pinned_choice(autotuner, state, key, args, kwargs):
    policy = _policy
    arch = current_arch()
    text = key_text(key)
    candidates = _candidates(autotuner, args, kwargs)
    descriptors = [descriptor(c) for c in candidates]
    entry = files.table_entry(_tables_for(arch), state.qualified, text)
    index, why, warning = selection.select(
        descriptors, table_entry=entry, block_sizes=policy.block_sizes, on_miss=policy.on_miss,
        defaults=config_defaults(), what=f"kernel {state.qualified} key ({text}) arch {arch}",
    )
    if warning and warning not in _warned:
        _warned.add(warning)
        logger.warning("%s; using %s", warning, why)
    if policy.chaos:
        from .distributed import rank_and_world

        index = selection.chaos_shift(index, len(candidates), rank_and_world()[0])
        why = "chaos"
    config = candidates[index]
    state.selected[key] = config
    signature = selection.signature(descriptors[index])
    evidence.note_choice(arch, state.qualified, text, signature, "pinned")
    logger.debug("pinned %s key (%s) -> %s (%s)", state.qualified, text, signature, why)
    return config


def _consensus_launch(autotuner, state, key, args, kwargs):
    """First launch of a key in consensus mode: tune it for the job, or pin the job's winner.

    The first thread of any rank to claim the decision in the job's Store times the candidates
    through Triton's own path (that launch is the tuning launch) and publishes the winner; every
    other rank, and every other thread, pins that winner.  Nothing here is a collective, so ranks
    may meet kernels in any order, or never.
    """
    with _consensus_gate(autotuner, key):  # one decision per key per process; later threads pin
        config = state.selected.get(key)
        if config is None:
            config = _consensus_decide(autotuner, state, key, args, kwargs)
            if isinstance(config, _Launched):
                return config.result
    return _run_pinned(autotuner, state, config, args, kwargs)


class _Launched:
    """The decision was made by tuning, and that tuning launch already ran the kernel."""

    __slots__ = ("result",)

    def __init__(self, result):
        self.result = result


# (id(autotuner), key) -> Lock, a few bytes per key ever decided.  Per autotuner rather than per
# state: two threads that both build a state at an autotuner's first launch still share the gate.
_consensus_gates: dict = {}
_consensus_gates_lock = threading.Lock()


def _consensus_gate(autotuner, key):
    with _consensus_gates_lock:
        gate = _consensus_gates.get((id(autotuner), key))
        if gate is None:
            gate = _consensus_gates[(id(autotuner), key)] = threading.Lock()
        return gate


def _consensus_decide(autotuner, state, key, args, kwargs):
    """The config to pin for ``key``, or _Launched when this thread tuned it."""
    from . import consensus, distributed

    policy = _policy
    arch = current_arch()
    text = key_text(key)
    what = f"kernel {state.qualified} key ({text}) arch {arch}"
    try:
        store = distributed.job_store()
    except distributed.StoreError as exc:
        raise consensus.ConsensusError(f"autotune_guard consensus: {what}: {exc}") from exc
    if store is None:
        return _consensus_alone(autotuner, state, key, text, arch, args, kwargs)
    with state.lock:  # pruning sets autotuner.nargs for the call, like Triton's own run does
        candidates = _candidates(autotuner, args, kwargs)
    signatures = [selection.signature(descriptor(c)) for c in candidates]
    name = consensus.decision_name(arch, state.qualified, text)
    rank = distributed.rank_and_world()[0]
    try:
        if distributed.store_claim(store, name, rank):
            return _consensus_tune(autotuner, state, key, text, arch, args, kwargs, candidates, signatures,
                                   store, name, rank)
        published = distributed.store_wait(store, name + "/result", policy.consensus_timeout)
        if published is None:
            claimer = distributed.store_owner(store, name)
            raise consensus.ConsensusError(consensus.timeout_message(what, claimer, policy.consensus_timeout))
    except distributed.StoreError as exc:
        raise consensus.ConsensusError(consensus.store_lost_message(what, exc)) from exc
    payload = consensus.decode(published, what)
    index = consensus.follow(payload, signatures, what)
    config = candidates[index]
    state.selected[key] = config
    _consensus_evidence(autotuner, state, arch, text, config, signatures[index], None, "consensus")
    logger.debug("consensus %s key (%s) -> %s (tuned by rank %s)", state.qualified, text, signatures[index],
                 payload.get("rank"))
    return config


def _consensus_tune(autotuner, state, key, text, arch, args, kwargs, candidates, signatures, store, name, rank):
    """This thread claimed the decision: Triton times the candidates, the winner is published."""
    from . import consensus, distributed

    try:
        if len(candidates) == 1:  # pruning left one: nothing to time (Triton < 3.8 would time it)
            result, winner, measured = _run_pinned(autotuner, state, candidates[0], args, kwargs), candidates[0], None
        else:
            result, winner, measured = _triton_tunes(autotuner, state, key, args, kwargs)
    except BaseException as exc:
        # Waiters fail now with the reason rather than at the timeout.
        try:
            distributed.store_set(store, name + "/result", consensus.encode_failure(rank, repr(exc)[:500]))
        except Exception as publish_error:
            logger.error("consensus: could not tell the other ranks that tuning %s failed: %s", state.qualified,
                         publish_error)
        raise
    desc = descriptor(winner)
    signature = selection.signature(desc)
    if signature in signatures:  # the live object, so that its hooks survive (not a disk-cache copy)
        winner = candidates[signatures.index(signature)]
    else:
        logger.warning("consensus: Triton's winner %s for %s key (%s) is not among the candidates after pruning",
                       signature, state.qualified, text)
    try:
        distributed.store_set(store, name + "/result",
                              consensus.encode_winner(rank, signature, compact(desc), signatures, measured is not None))
    except distributed.StoreError as exc:
        raise consensus.ConsensusError(f"autotune_guard consensus: kernel {state.qualified} key ({text}) arch "
                                       f"{arch}: tuned here but could not publish the winner: {exc}") from exc
    state.selected[key] = winner
    _consensus_evidence(autotuner, state, arch, text, winner, signature, measured, "consensus")
    logger.debug("consensus %s key (%s) -> %s (tuned here for the job)", state.qualified, text, signature)
    return _Launched(result)


def _consensus_alone(autotuner, state, key, text, arch, args, kwargs):
    """No process group at the moment of choice: Triton tunes for this process alone, as in auto."""
    from .distributed import rank_and_world

    note = "consensus: no process group"
    if note not in _warned:
        _warned.add(note)
        world = rank_and_world()[1]
        if world > 1:  # a distributed job that has not initialized its group yet: choices may differ
            logger.warning("AUTOTUNE_MODE=consensus but torch.distributed is not initialized yet (world size %d "
                           "from the environment): choices made before init_process_group are this rank's own, "
                           "timed as in auto mode", world)
        else:
            logger.info("AUTOTUNE_MODE=consensus without a torch.distributed process group: choices are timed "
                        "by this process alone, as in auto mode")
    result, winner, measured = _triton_tunes(autotuner, state, key, args, kwargs)
    state.selected[key] = winner
    _consensus_evidence(autotuner, state, arch, text, winner, selection.signature(descriptor(winner)), measured,
                        "timed")
    return _Launched(result)


def _triton_tunes(autotuner, state, key, args, kwargs):
    """Triton's own tuning launch of a new key: (its result, the winner, Triton's timings by
    signature when it timed in this process).  Under the lock, which keeps pinned launches of the
    autotuner's other keys (they swap ``configs``) away from the tuning, which reads ``configs``."""
    with state.lock:
        timings_before = autotuner.__dict__.get("configs_timings")
        result = _original_run(autotuner, *args, **kwargs)
        winner = autotuner.cache.get(key, autotuner.__dict__.get("best_config"))
        timings = autotuner.__dict__.get("configs_timings")
    return result, winner, _measured(autotuner, timings, timings_before)


def _measured(autotuner, timings, timings_before) -> dict | None:
    """Triton's timings of the launch just made, by signature, if it timed in this process: it
    replaced ``configs_timings`` with one keyed by the live candidates (a disk-cache hit replaces
    it too, with Configs rebuilt from JSON)."""
    if timings is None or timings is timings_before:
        return None
    live = {id(c) for c in autotuner.configs}
    if not all(id(c) in live for c in timings):
        return None
    return {selection.signature(descriptor(c)): [float(t) for t in _as_list(v)] for c, v in timings.items()}


def _consensus_evidence(autotuner, state, arch, text, config, signature, measured, how) -> None:
    """The choice log on every rank; the record file too when AUTOTUNE_RECORD_PATH is set."""
    evidence.note_choice(arch, state.qualified, text, signature, how)
    if _policy.record_path:
        evidence.note_record(arch, state.qualified, text, compact(descriptor(config)), signature, how, measured,
                             [compact(descriptor(c)) for c in autotuner.configs])


def _observe(autotuner, state, timings_before) -> None:
    """Log (and in record mode record) the winners Triton just chose."""
    arch = current_arch()
    cache = autotuner.cache
    measured_now = _measured(autotuner, autotuner.__dict__.get("configs_timings"), timings_before)
    # The timings belong to the key this launch added, the last one inserted; any other unseen
    # key was chosen before this policy was installed.
    newest = next(reversed(cache), None) if cache else None
    for key, config in list(cache.items()):
        if key in state.seen:
            continue
        state.seen.add(key)
        text = key_text(key)
        desc = descriptor(config)
        signature = selection.signature(desc)
        evidence.note_choice(arch, state.qualified, text, signature, "timed")
        if state.mode == "record":
            measured = measured_now if key == newest else None
            evidence.note_record(arch, state.qualified, text, compact(desc), signature,
                                 "timed" if measured is not None else "reused", measured,
                                 [compact(descriptor(c)) for c in autotuner.configs])


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


# --- configs, arch, tables ----------------------------------------------------------------------

def descriptor(config) -> dict:
    """A live ``triton.Config`` as plain data (see ``selection``)."""
    return {
        "kwargs": dict(config.kwargs),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": getattr(config, "num_ctas", 1),
        "maxnreg": getattr(config, "maxnreg", None),
    }


def compact(desc: dict) -> dict:
    """A descriptor as files store it (unset maxnreg left out)."""
    return {k: v for k, v in desc.items() if v is not None}


def config_defaults() -> dict:
    """Triton's own defaults for the launch options a table entry may omit."""
    global _config_defaults
    if _config_defaults is None:
        import triton

        params = inspect.signature(triton.Config.__init__).parameters
        _config_defaults = {n: params[n].default for n in selection.OPTION_FIELDS if n in params}
    return _config_defaults


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def current_arch() -> str:
    """``sm90``, ``gfx942`` or ``interpret``; read at the first launch that needs it, so that
    installing never initializes CUDA."""
    global _arch_name
    if _arch_name is None:
        if _interpreting():
            _arch_name = "interpret"
        else:
            from triton.runtime.driver import driver

            target = driver.active.get_current_target()
            if target.backend == "cuda":
                _arch_name = f"sm{target.arch}"
            else:
                _arch_name = str(target.arch).split(":")[0]
    return _arch_name


def _tables_for(arch: str) -> dict:
    tables = _tables.get(arch)
    if tables is None:
        tables = _tables[arch] = files.load_tables(_policy.table_path, arch, evidence.versions())
    return tables


def active_policy() -> AutotunePolicy | None:
    return _policy
