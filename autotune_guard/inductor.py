"""Carrying out the policy inside ``torch.compile``: Inductor's ``CachingAutotuner``.

The only module that touches ``torch._inductor`` internals (as ``interception`` is for Triton's).

Under ``torch.compile`` a ``@triton.autotune`` kernel never reaches ``Autotuner.run``: Dynamo
records the kernel in its side table, Inductor re-emits its source under
``triton_heuristics.user_autotune(configs=...)``, and a ``CachingAutotuner`` times every config
at the first run (``autotune_to_one_config`` -> ``benchmark_all_configs``), once per process,
after reading a winner from its own ``.best_config`` cache if one is there.  Inductor's own
generated kernels (pointwise, reductions) with several configs go the same way.

The seam, present from torch 2.6 through 2.13 at least, is ``autotune_to_one_config(self, *args)``:
its job is to leave exactly one launcher in ``self.launchers``.  The guard replaces it:

* pinned: the launcher is chosen by the same rule as eager pinned mode (table entry,
  ``AUTOTUNE_BLOCK_SIZES``, ``AUTOTUNE_ON_MISS``, chaos) over the same candidate descriptions,
  for the same kernel name and tuning key, so eager and compiled calls run the same config.
  Inductor's benchmarker is never called, and its ``.best_config`` cache is neither read nor
  written (a cached winner is a timing result, and the choice must not depend on the disk).
* consensus: one rank times through Inductor's own path, the others pin its winner, through
  the same Store protocol as eager consensus.
* auto and record: Inductor times as usual; the winner, and in record mode Inductor's
  timings, go into the choice log and the record.

Names.  A user kernel keeps the eager name ``module.function``, found by matching the compiled
source with the kernels Dynamo saw (its side table); its tuning key is rebuilt from the runtime
arguments with Triton's formula (key arguments' values, then every dtype), because Inductor
drops the key (pytorch #164124).  An Inductor-generated kernel is ``inductor.<hash>``: a hash of
its source with the generated function name taken out, so the same graph on the same torch gives
the same name on every rank and run (a new torch release that generates other code gives new
names); its key is its size hints.

Never silent: anything here that autotunes and that the guard does not govern (coordinate
descent tuning, a cache hit in auto mode, a torch whose seam moved) is named once per kernel,
counted at exit, and an error with ``AUTOTUNE_ON_MISS=error``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
import logging
import operator
import re
import sys
import threading

from . import api, interception, pinning, selection
from . import state as shared

logger = logging.getLogger("autotune_guard")

_PATCHED = "_autotune_guard"
_ORIGINALS = "_autotune_guard_originals"  # on each patched class: method name -> Inductor's own
_lock = threading.Lock()
_user_kernels: dict = {}  # (function name, source hash) -> (qualified, autotuner or None)
_named: set[str] = set()  # warnings said once per process


# --- installing ---------------------------------------------------------------------------------

def patch(heuristics) -> None:
    """Post-import hook of ``torch._inductor.runtime.triton_heuristics``: replace the autotuning
    step of ``CachingAutotuner`` (once).  Never raises into torch's import unless the policy asks
    for errors (``AUTOTUNE_ON_MISS=error``) and the seam is missing."""
    cls = getattr(heuristics, "CachingAutotuner", None)
    if cls is None or not callable(getattr(cls, "autotune_to_one_config", None)) \
            or not callable(getattr(cls, "benchmark_all_configs", None)):
        _seam_missing("torch._inductor.runtime.triton_heuristics.CachingAutotuner.autotune_to_one_config")
        return
    if getattr(cls.autotune_to_one_config, _PATCHED, False):
        return
    setattr(cls, _ORIGINALS, {"autotune_to_one_config": cls.autotune_to_one_config,
                              "benchmark_all_configs": cls.benchmark_all_configs})
    _replace(cls, "autotune_to_one_config", _guarded_autotune)
    _replace(cls, "benchmark_all_configs", _kept_timings)
    for method, (flag, what) in RETUNERS.items():
        original = getattr(cls, method, None)
        if callable(original):
            _replace(cls, method, _guarded_retuner(original, flag, what))
    _patch_cache(heuristics)


def _replace(cls, method: str, function) -> None:
    """Put ``function`` on ``cls`` as ``method``, under that name: a bound method pickles as
    ``getattr(instance, __name__)``, and Inductor's compile workers send kernels (holding bound
    methods such as the cache's ``save``) to the parent by pickle."""
    function.__name__ = method
    setattr(cls, method, function)


def _patch_cache(heuristics) -> None:
    """Inductor's on-disk winner (``.best_config``): not read under pinned, consensus and record
    (the choice must come from the policy, and record needs timings), not written under pinned."""
    cache_cls = getattr(heuristics, "AutotuneCache", None)  # imported there from .autotune_cache
    if cache_cls is None or not callable(getattr(cache_cls, "read_best", None)):
        _seam_missing("torch._inductor.runtime.autotune_cache.AutotuneCache.read_best")
        return
    if getattr(cache_cls.read_best, _PATCHED, False):
        return
    setattr(cache_cls, _ORIGINALS, {"read_best": cache_cls.read_best, "save": getattr(cache_cls, "save", None)})
    _replace(cache_cls, "read_best", _guarded_read_best)
    if callable(getattr(cache_cls, "save", None)):
        _replace(cache_cls, "save", _guarded_save)


def _original(obj, method: str):
    """Inductor's own ``method`` of ``obj``'s class (kept on the class when it was patched)."""
    return getattr(type(obj), _ORIGINALS)[method]


def _seam_missing(what: str) -> None:
    import torch

    message = (f"autotune_guard cannot govern autotuning under torch.compile with torch {torch.__version__}: "
               f"{what} is missing. Kernels autotuned by Inductor in this process are NOT governed")
    policy = interception.active_policy()
    if policy is not None and policy.on_miss == "error":
        raise selection.SelectionError(message + " (AUTOTUNE_ON_MISS=error)")
    logger.error("%s", message)
    shared.note_ungoverned("torch.compile", "this torch's Inductor has no seam autotune_guard knows")


# --- the autotuning step ------------------------------------------------------------------------

def _guarded_autotune(self, *args, **kwargs):
    policy = interception.active_policy()
    if policy is None:
        return _original(self, "autotune_to_one_config")(self, *args, **kwargs)
    kernel = describe_kernel(self, args)
    api.first_choice_of(kernel.qualified, {name for d in kernel.descriptors for name in d["kwargs"]})
    policy = interception.active_policy()  # a late determinism request may just have made it pinned
    mode = policy.mode if policy.in_scope(kernel.qualified) else "off"
    if self.inductor_meta.get("max_autotune") or self.inductor_meta.get("max_autotune_pointwise"):
        _name_once("max-autotune", "torch.compile max-autotune: Inductor's template selection (select_algorithm) "
                   "benchmarks its GEMM/conv templates while compiling; autotune_guard governs the kernels' configs, "
                   "not that choice")
    if policy.enumerate:
        how = {"off": "left to Inductor (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(mode, "timed")
        logger.info("torch.compile kernel %s key (%s): %d candidates, %s", kernel.qualified, kernel.key,
                    len(kernel.descriptors), how)
    if mode == "off":
        return _original(self, "autotune_to_one_config")(self, *args, **kwargs)
    if kernel.key_of is not None and _one_key_in_program(self, kernel.key_of[0]):
        kernel.key_of = None  # compiled for static shapes: the key cannot change, no launch wrapper needed
    if mode == "pinned":
        candidates = list(self.launchers)
        _keep(self, _pinned(kernel, kernel.key, policy), release=kernel.key_of is None)
        if kernel.key_of is not None:
            _follow_keys(self, kernel, candidates, policy)
        return None
    if mode == "consensus":
        _consensus(self, kernel, args, kwargs, policy)
    else:
        _timed(self, kernel, args, kwargs, policy, "timed")
    if kernel.key_of is not None:
        _follow_keys(self, kernel, None, policy)
    return None


def _one_key_in_program(self, positions: tuple) -> bool:
    """Whether the compiled program that launches this kernel passes its key arguments as the
    same literals at every call (``k.run(x, out, 16384, stream=...)``): a graph compiled for
    static shapes, where the key cannot change, so the per-launch wrapper of ``_follow_keys`` is
    not needed and the steady state stays Inductor's own ``run``.  Read from the source of the
    module whose code called ``run`` (Inductor's generated wrapper, a file in its cache), at the
    first launch only.  Anything unexpected (a symbolic size ``s0``, an expression, two different
    literals, a caller that is not a generated function, a source that cannot be read) answers
    False: the wrapper follows the key, as it must when in doubt."""
    own = {__name__, *(getattr(c, "__module__", None) for c in type(self).__mro__)}
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in own:
        frame = frame.f_back
    if frame is None or frame.f_code.co_name == "<module>":  # e.g. autotuning at compile time
        return False
    names = {name for name, value in list(frame.f_globals.items()) if value is self}
    tree = _parsed(frame.f_code.co_filename)
    if not names or tree is None:
        return False
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in names:
            if any(p >= len(node.args) or not isinstance(node.args[p], ast.Constant) for p in positions):
                return False
            keys.add(tuple(node.args[p].value for p in positions))
    return len(keys) == 1


@functools.lru_cache(maxsize=16)  # one generated module launches many kernels: parse it once
def _parsed(filename: str):
    lines = linecache.getlines(filename)
    try:
        return ast.parse("".join(lines), filename) if lines else None
    except (SyntaxError, ValueError):
        return None


def _pinned(kernel, key: str, policy) -> int:
    """Eager pinned mode's choice for ``key``, noted in the choice log."""
    index, why = pinning.pinned_index(kernel.qualified, key, kernel.descriptors, policy)
    signature = selection.signature(kernel.descriptors[index])
    shared.note_choice(kernel.arch, kernel.qualified, key, signature, "pinned")
    logger.debug("pinned (torch.compile) %s key (%s) -> %s (%s)", kernel.qualified, key, signature, why)
    return index


def _follow_keys(self, kernel, candidates, policy) -> None:
    """A kernel compiled for dynamic shapes runs one config for every value of its tuning key
    (Inductor drops the key, pytorch #164124).  The guard follows the key on this kernel's own
    launches: pinned switches to the launcher pinned for each new key (``candidates``: every
    launcher, kept alive for that); other modes note each new key with the config Inductor kept,
    as ``reused``.  Costs a Python call, a tuple and a dict lookup per launch, on these kernels only:
    a program compiled for static shapes gets no wrapper (``_one_key_in_program``)."""
    positions, key_text = kernel.key_of
    class_run = type(self).run
    key_values = operator.itemgetter(*positions)  # C-level: the launch path pays one call for it
    first = current = self.launchers[0]
    seen = {}

    def run(*args, **kwargs):
        nonlocal current
        launcher = seen.get(key_values(args))
        if launcher is not current:  # a key not seen yet (None), or another key's launcher
            if launcher is None:
                launcher = seen[key_values(args)] = _launcher_for_key(self, kernel, key_text(args), candidates,
                                                                      first, policy)
            current = launcher
            self.launchers = [launcher]
            if "_cached_launcher" in self.__dict__:  # torch 2.13's fast path caches the launcher
                self._cached_launcher = None
        return class_run(self, *args, **kwargs)

    self.run = run


def _launcher_for_key(self, kernel, key: str, candidates, first, policy):
    if candidates is not None:
        return candidates[_pinned(kernel, key, policy)]
    signature = selection.signature(_project(first.config, kernel.meta_names))
    shared.note_choice(kernel.arch, kernel.qualified, key, signature, "reused")
    return first


def _timed(self, kernel, args, kwargs, policy, how: str) -> str:
    """Inductor's own timing; the winner (and, for records, the timings) into the evidence.
    Returns the winner's signature."""
    self._autotune_guard_timings = None
    _original(self, "autotune_to_one_config")(self, *args, **kwargs)
    (launcher,) = self.launchers
    winner = _project(launcher.config, kernel.meta_names)
    signature = selection.signature(winner)
    timings = self.__dict__.pop("_autotune_guard_timings", None)
    measured = None
    if timings:
        measured = {selection.signature(_project(l.config, kernel.meta_names)): [float(t)] for l, t in timings.items()}
    shared.note_choice(kernel.arch, kernel.qualified, kernel.key, signature, how)
    if policy.record_path:
        shared.note_record(kernel.arch, kernel.qualified, kernel.key, selection.compact(winner), signature,
                             how, measured, [selection.compact(d) for d in kernel.descriptors])
    return signature


def _consensus(self, kernel, args, kwargs, policy):
    """One rank of the job times this kernel through Inductor's own path and publishes the
    winner in the job's Store; the others pin it (``consensus.decide``, eager consensus's protocol
    and decision names, so an eager and a compiled call of one kernel and key share one decision)."""
    from . import consensus, distributed

    what = f"kernel {kernel.qualified} key ({kernel.key}) arch {kernel.arch}"
    signatures = [selection.signature(d) for d in kernel.descriptors]
    try:
        store = distributed.job_store()
    except consensus.StoreError as exc:
        raise consensus.ConsensusError(f"autotune_guard consensus: {what}: {exc}") from exc
    if store is None:
        _name_once("consensus-alone", "AUTOTUNE_MODE=consensus without a torch.distributed process group: "
                   "torch.compile kernels are timed by this process alone, as in auto mode", level=logging.INFO)
        _timed(self, kernel, args, kwargs, policy, "timed")
        return
    name = consensus.decision_name(kernel.arch, kernel.qualified, kernel.key)
    index, tuned_here, _ = consensus.decide(store, what, name, distributed.rank_and_world()[0], signatures,
                                            lambda: _timed(self, kernel, args, kwargs, policy, "consensus"),
                                            policy.consensus_timeout)
    if not tuned_here:
        _keep(self, index)
        shared.note_choice(kernel.arch, kernel.qualified, kernel.key, signatures[index], "consensus")


def _keep(self, index: int, release: bool = True) -> None:
    """Leave the chosen launcher as the kernel's only one, as Inductor's own step does."""
    chosen = self.launchers[index]
    free = getattr(self, "_release_static_launchers_except", None)  # torch 2.13: frees the losers
    if release and callable(free):
        free(chosen)
    self.launchers = [chosen]


def _kept_timings(self, *args, **kwargs):
    """Inductor's benchmark of every launcher; its timings are kept for the record."""
    timings = _original(self, "benchmark_all_configs")(self, *args, **kwargs)
    self._autotune_guard_timings = timings
    return timings


# Steps that re-time a kernel after its config was chosen: method -> (the flag Inductor sets on the
# config once the step ran, what the step is).
RETUNERS = {
    "coordinate_descent_tuning": ("found_by_coordesc", "coordinate descent tuning "
                                  "(torch._inductor.config.coordinate_descent_tuning)"),
    "_combo_sequential_autotune": ("found_by_combo_autotune", "combo-kernel block-size tuning"),
}


def _guarded_retuner(original, flag: str, what: str):
    """Pinned: the step is skipped (its flag set, so Inductor does not ask again), since pinned
    mode never times.  Other modes: it runs, and the kernel is named as not governed."""

    def retune(self, launcher, *args, **kwargs):
        policy = interception.active_policy()
        if policy is None:
            return original(self, launcher, *args, **kwargs)
        name = describe_kernel(self, args).qualified
        if not policy.in_scope(name):
            return original(self, launcher, *args, **kwargs)
        if policy.mode == "pinned":
            setattr(launcher.config, flag, True)
            _name_once(f"skip|{what}|{name}", f"torch.compile kernel {name}: {what} skipped, pinned mode does not "
                       "time", level=logging.INFO)
            return launcher
        _ungoverned(name, f"{what} re-timed it after its config was chosen", policy)
        return original(self, launcher, *args, **kwargs)

    setattr(retune, _PATCHED, True)
    return retune


def _guarded_read_best(self, inductor_meta, configs):
    policy = interception.active_policy()
    if policy is not None and policy.mode in ("pinned", "consensus", "record"):
        return None  # the policy decides, not a winner some earlier process timed
    best = _original(self, "read_best")(self, inductor_meta, configs)
    if best is not None and policy is not None:
        name = (inductor_meta or {}).get("kernel_name", "?")
        _ungoverned(f"inductor cache:{name}", "Inductor's .best_config cache chose its config (not timed, not "
                    "observed in this process)", policy)
    return best


def _guarded_save(self, *args, **kwargs):
    policy = interception.active_policy()
    if policy is not None and policy.mode == "pinned":
        return None  # a pinned choice is not a timing result: it must not become a later run's "best"
    return _original(self, "save")(self, *args, **kwargs)


for _f in (_guarded_autotune, _kept_timings, _guarded_read_best, _guarded_save):
    setattr(_f, _PATCHED, True)


def _ungoverned(name: str, why: str, policy) -> None:
    """A choice this process made that the guard did not govern: named once, counted at exit."""
    if not shared.note_ungoverned(name, why):
        return
    message = f"torch.compile kernel {name}: {why}; autotune_guard did not govern this choice"
    if policy.on_miss == "error":
        raise selection.SelectionError("autotune_guard: " + message + " (AUTOTUNE_ON_MISS=error)")
    logger.warning("%s", message)


def _name_once(tag: str, message: str, level: int = logging.WARNING) -> None:
    if tag not in _named:
        _named.add(tag)
        logger.log(level, "%s", message)


# --- what a compiled kernel is called, and its key ----------------------------------------------

class CompiledKernel:
    """What the guard knows of one ``CachingAutotuner`` at its autotuning step.  ``key_of`` is set
    for a user kernel whose tuning key reads runtime arguments (a kernel compiled for dynamic
    shapes): ``(positions of those arguments, args -> key text)``."""

    __slots__ = ("qualified", "key", "arch", "descriptors", "meta_names", "key_of")

    def __init__(self, qualified, key, arch, descriptors, meta_names, key_of=None):
        self.qualified, self.key, self.arch = qualified, key, arch
        self.descriptors, self.meta_names, self.key_of = descriptors, meta_names, key_of


def describe_kernel(autotuner, args) -> CompiledKernel:
    fn = autotuner.fn
    source = getattr(fn, "src", "") or ""
    name = getattr(fn, "__name__", "kernel")
    meta_names = key_of = None
    if getattr(autotuner, "custom_kernel", False):
        qualified, original = user_kernel(name, source, autotuner.inductor_meta.get("kernel_name"))
        if original is not None:
            meta_names = frozenset(n for c in original.configs for n in c.kwargs)
            key_of = _key_builder(list(original.arg_names), list(original.keys), _runtime_arg_names(autotuner),
                                  dict(autotuner.triton_meta.get("constants") or {}))
            key = key_of[1](args)
            if not key_of[0]:
                key_of = None  # every key argument is a compile-time constant: one key per compiled kernel
        else:
            key = "*"
    else:
        qualified = generated_name(name, source)
        key = size_hints_text(getattr(autotuner, "size_hints", None))
    descriptors = [_project(launcher.config, meta_names) for launcher in autotuner.launchers]
    return CompiledKernel(qualified, key, interception.current_arch(), descriptors, meta_names, key_of)


def _key_builder(arg_names: list, keys: list, runtime_names: list, constants: dict):
    """(positions of the runtime arguments the key reads, args -> key text)."""
    positions = tuple(i for i, name in enumerate(runtime_names) if name in keys)

    def key_text(args) -> str:
        values = dict(zip(runtime_names, args))
        values.update(constants)
        return selection.key_text(rebuild_key(arg_names, keys, values))

    return positions, key_text


def user_kernel(name: str, source: str, generated: str | None):
    """``(module.function, original autotuner or None)`` of a user kernel compiled by Inductor.

    Matched by function name and source with the kernels Dynamo put in its side table; Inductor
    copies the source as it is (renaming the function only with
    ``config.triton.unique_user_kernel_names``).  Not found: the generated name, said once."""
    source_id = source_hash(source, name)
    found = _user_kernels.get((name, source_id))
    if found is not None:
        return found
    found = None
    try:
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

        for kernel in list(kernel_side_table.id_to_kernel.values()):
            jit, autotuner = _unwrap(kernel)
            if jit is None:
                continue
            jit_name = getattr(jit, "__name__", "")
            if source_hash(getattr(jit, "src", "") or "", jit_name) == source_id:
                found = (f"{getattr(jit, '__module__', '?')}.{jit_name}", autotuner)
                break
    except Exception as exc:  # a moved side table: name the kernel by what Inductor calls it
        logger.debug("Dynamo's kernel side table could not be read: %r", exc)
    if found is None:
        found = (f"torch_compile.{generated or name}", None)
        _name_once(f"unmatched|{name}", f"torch.compile user kernel {name}: its original @triton.autotune kernel "
                   f"was not found among the kernels Dynamo traced; named {found[0]} with key '*'")
    with _lock:
        _user_kernels[(name, source_id)] = found
    return found


def _unwrap(kernel):
    """(JITFunction, Autotuner or None) of a kernel object Dynamo saw: an Autotuner, Heuristics
    wrapping one, or a bare JITFunction."""
    autotuner = None
    for _ in range(8):
        if autotuner is None and hasattr(kernel, "keys") and hasattr(kernel, "configs"):
            autotuner = kernel
        if hasattr(kernel, "src") and hasattr(kernel, "arg_names") and not hasattr(kernel, "configs"):
            return kernel, autotuner
        kernel = getattr(kernel, "fn", None)
        if kernel is None:
            break
    return None, autotuner


_DEF = re.compile(r"^(\s*def\s+)([A-Za-z_][A-Za-z0-9_]*)")


def source_hash(source: str, name: str) -> str:
    """A hash of a kernel's source that ignores indentation, blank lines, decorators and the
    function's own name: the same kernel body hashes alike wherever it was generated."""
    lines = []
    for line in source.splitlines():
        text = line.strip()
        if not text or text.startswith("@"):
            continue
        match = _DEF.match(text)
        if match and match.group(2) == name:
            text = match.group(1) + "_" + text[match.end():]
        lines.append(text)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def generated_name(name: str, source: str) -> str:
    """``inductor.<hash>`` for a kernel Inductor generated (its own names, ``triton_red_fused_0``,
    are numbered in graph order and so differ between programs and recompiles)."""
    return f"inductor.{source_hash(source, name)}"


def size_hints_text(size_hints) -> str:
    """The key of an Inductor-generated kernel: its size hints, ``x=64,r0_=4096``."""
    if isinstance(size_hints, dict):
        return ",".join(f"{k}={v}" for k, v in size_hints.items())
    if isinstance(size_hints, (list, tuple)):
        return ",".join(str(v) for v in size_hints)
    return "*"


def rebuild_key(arg_names: list, keys: list, values: dict) -> tuple:
    """Triton's tuning key (3.2+ formula) from the arguments a compiled kernel runs with: the key
    arguments' values, then the dtype of every argument that has one, in declaration order."""
    key = [values[name] for name in keys if name in values]
    key += [str(values[name].dtype) for name in arg_names if name in values and hasattr(values[name], "dtype")]
    return tuple(key)


def _runtime_arg_names(autotuner) -> list:
    """Names of the positional arguments Inductor's launcher takes, in order."""
    for launcher in autotuner.launchers:
        names = getattr(launcher, "def_args", None)
        if names:
            return list(names)
    signature = autotuner.triton_meta.get("signature") or {}
    constants = autotuner.triton_meta.get("constants") or {}
    return [n for n, kind in signature.items() if kind != "constexpr" and n not in constants]


def _project(config, meta_names) -> dict:
    """A config as the eager autotuner would describe it: Dynamo folds ``@triton.heuristics``
    values into the compiled configs, which eager candidates do not carry."""
    desc = selection.descriptor(config)
    if meta_names is not None:
        desc["kwargs"] = {k: v for k, v in desc["kwargs"].items() if k in meta_names}
    return desc
