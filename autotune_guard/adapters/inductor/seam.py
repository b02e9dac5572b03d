"""What the Inductor adapter assumes about torch's Inductor, in one place: ``CachingAutotuner``'s
fields (its launchers, their configs, its metadata, its bench and its fast-path cache), the frames
of the generated program that launches one, Dynamo's side table of the kernels it traced (and the
fields of the ``@triton.autotune`` kernel found there: adapters never import each other, so the
Triton seam cannot be asked), and ``select_algorithm``'s internals. Every other module of the
adapter reads them through this one (``scripts/house_metrics.py`` flags ``INDUCTOR_FIELDS`` read
elsewhere, whatever the object is called), so a torch upgrade means reading one file. Each accessor
says what it reads and the torch it holds since; 2.6 is the adapter's floor, 2.11 and 2.13 are
tested.
"""

from __future__ import annotations

import inspect
import sys

MISSING = object()
# Inductor's steady launch in ``CachingAutotuner.run``, blanks removed (2.6 ... 2.13).
STEADY_CALL = "launcher(*args,**kwargs,stream=stream"
# Per-call work that ``run`` does besides the launch; any set means the launch cannot be written out.
PER_CALL_FIELDS = ("triton_interpret", "dump_launch_params", "dump_launch_tensors", "_plugins")
PACKAGE = __name__.rpartition(".")[0]  # frames of this adapter are skipped when looking for the program


# --- CachingAutotuner (torch._inductor.runtime.triton_heuristics): what it launches ------------------

def kernel_source(autotuner) -> tuple[str, str]:
    """``(fn.__name__, fn.src)`` of the kernel's JIT function (2.6+)."""
    fn = autotuner.fn
    return getattr(fn, "__name__", "kernel"), getattr(fn, "src", "") or ""


def is_user_kernel(autotuner) -> bool:
    """``custom_kernel``: a user's ``@triton.jit`` kernel, not one Inductor generated (2.6+)."""
    return bool(getattr(autotuner, "custom_kernel", False))


def inductor_name(autotuner) -> str | None:
    """``inductor_meta["kernel_name"]``: what Inductor calls the kernel in its program (2.6+)."""
    return meta_kernel_name(autotuner.inductor_meta)


def meta_kernel_name(inductor_meta) -> str | None:
    """``kernel_name`` of an ``inductor_meta`` dict (``AutotuneCache.read_best`` is given one, 2.6+)."""
    return (inductor_meta or {}).get("kernel_name")


def asks_max_autotune(autotuner) -> bool:
    """``inductor_meta["max_autotune"]`` or ``["max_autotune_pointwise"]`` (2.6+)."""
    meta = autotuner.inductor_meta
    return bool(meta.get("max_autotune") or meta.get("max_autotune_pointwise"))


def folded_constants(autotuner) -> dict:
    """``triton_meta["constants"]``: the arguments Inductor folded into the kernel (2.6+)."""
    return dict(autotuner.triton_meta.get("constants") or {})


def size_hints_of(autotuner):
    """``size_hints`` of a generated kernel: a dict (2.6+: ``{"x": 64, "r0_": 4096}``) or a list."""
    return getattr(autotuner, "size_hints", None)


def runtime_arg_names(autotuner) -> list:
    """Names of the positional arguments Inductor's launcher takes, in order: a launcher's
    ``def_args`` (2.6+), else ``triton_meta["signature"]`` less constexprs and constants."""
    for launcher in autotuner.launchers:
        names = getattr(launcher, "def_args", None)
        if names:
            return list(names)
    signature = autotuner.triton_meta.get("signature") or {}
    constants = autotuner.triton_meta.get("constants") or {}
    return [n for n, kind in signature.items() if kind != "constexpr" and n not in constants]


def launchers_of(autotuner) -> list:
    """``launchers``: one per config until the step leaves one (2.6+)."""
    return list(autotuner.launchers)


def only_launcher(autotuner):
    """The one launcher Inductor's own step left in ``launchers`` (2.6+)."""
    (launcher,) = autotuner.launchers
    return launcher


def launcher_config(launcher):
    """``launcher.config``: the triton.Config a launcher was compiled for (2.6+)."""
    return launcher.config


def mark_retuned(launcher, flag: str) -> None:
    """Set the config flag a re-tuner sets once it ran (``found_by_coordesc``, ...; 2.6+)."""
    setattr(launcher.config, flag, True)


# --- CachingAutotuner: choosing a launcher ---------------------------------------------------

def keep_only(autotuner, chosen, release: bool = True) -> None:
    """Leave ``chosen`` as the only launcher, as Inductor's own step does; ``release``: free the
    others' static launchers first (``_release_static_launchers_except``, 2.13)."""
    free = getattr(autotuner, "_release_static_launchers_except", None)
    if release and callable(free):
        free(chosen)
    autotuner.launchers = [chosen]


def put_launcher(autotuner, launcher) -> None:
    """Make ``launcher`` the one ``run`` launches: ``launchers``, and the fast path's cached
    launcher dropped (``_cached_launcher``, 2.13), so that ``run`` caches the new one."""
    autotuner.launchers = [launcher]
    if "_cached_launcher" in autotuner.__dict__:
        autotuner._cached_launcher = None


def steady_launcher(autotuner, launcher):
    """What ``run``'s steady path calls now that ``launcher`` is the only one, or None when that is
    not one call of a known launcher: 2.13's ``_cached_launcher``; before, ``launcher`` itself
    unless it stores its cubin (``store_cubin``: ``run`` then does more per call)."""
    if autotuner.launchers != [launcher]:
        return None
    steady = autotuner.__dict__.get("_cached_launcher", MISSING)
    if steady is MISSING:
        return None if launcher.store_cubin else launcher
    return steady


def can_write_out(autotuner) -> bool:
    """Whether ``run``'s steady path for a decided key is one launcher call: 2.13's fast-path cache
    (``_cached_launcher``), or (2.6 ... 2.12) a run whose steady launch is ``STEADY_CALL`` with
    none of ``PER_CALL_FIELDS`` set and no constexpr arguments re-added per call."""
    if "_cached_launcher" in autotuner.__dict__:
        return True
    if any(getattr(autotuner, name, None) for name in PER_CALL_FIELDS):
        return False
    try:
        source = inspect.getsource(type(autotuner).run)
    except (OSError, TypeError):
        return False
    source = "".join(source.split())
    return STEADY_CALL in source and "_get_args_with_constexprs" not in source


def debug_mode_probe(autotuner):
    """``get_active_debug_mode`` of ``triton_heuristics`` (2.13; None before): a debug mode makes
    ``run`` do more than launch."""
    return getattr(sys.modules.get(type(autotuner).__module__), "get_active_debug_mode", None)


def can_bench(autotuner) -> bool:
    """Whether the kernel times one launcher on its own (``bench``, 2.6+)."""
    return callable(getattr(autotuner, "bench", None))


def time_launcher(autotuner, launcher, args, kwargs) -> float:
    """``bench(launcher, *args, **kwargs)``: Inductor's timing of one launcher, its clones of mutated
    arguments and resets to zero included (2.6+), in ms."""
    return float(autotuner.bench(launcher, *args, **kwargs))


# --- the generated program that launches a kernel (its frames) -----------------------------------

def launching_program(autotuner):
    """``(global names bound to autotuner, file name)`` of the generated module whose code launches
    ``autotuner``: the first frame outside this adapter and Inductor's classes; None when there is
    none or the launch is at module level (autotuning at compile time)."""
    own = {getattr(c, "__module__", None) for c in type(autotuner).__mro__}
    frame = sys._getframe(1)
    while frame is not None and _is_own(frame.f_globals.get("__name__"), own):
        frame = frame.f_back
    if frame is None or frame.f_code.co_name == "<module>":
        return None
    names = {name for name, value in list(frame.f_globals.items()) if value is autotuner}
    return names, frame.f_code.co_filename


def _is_own(module: str | None, classes: set) -> bool:
    return module in classes or (module is not None and (module == PACKAGE or module.startswith(PACKAGE + ".")))


# --- Dynamo's side table of the user kernels it traced (torch._higher_order_ops) ---------------------

def traced_kernels() -> list:
    """The kernel objects Dynamo saw (``kernel_side_table.id_to_kernel``, 2.6+); raises when moved."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    return list(kernel_side_table.id_to_kernel.values())


def unwrap(kernel):
    """(JITFunction, Autotuner or None) of a kernel object Dynamo saw: an Autotuner (``keys`` and
    ``configs``), Heuristics wrapping one, or a bare JITFunction (``src`` and ``arg_names``), each
    reached through ``fn``; (None, ...) when there is none."""
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


def jit_identity(jit) -> tuple[str, str, str]:
    """``(__name__, src, __module__)`` of a traced JITFunction."""
    return getattr(jit, "__name__", ""), getattr(jit, "src", "") or "", getattr(jit, "__module__", "?")


def eager_tuning(original) -> tuple[frozenset, list, list]:
    """(the configs' kwarg names, ``arg_names``, ``keys``) of the ``@triton.autotune`` kernel Dynamo
    traced (Triton 3.2+'s Autotuner fields, which Inductor drops)."""
    return frozenset(n for c in original.configs for n in c.kwargs), original.arg_names, original.keys


# --- select_algorithm's internals (torch._inductor.select_algorithm) ---------------------------------

def selector_class(module):
    """``AlgorithmSelectorCache`` when it has the seam the guard patches (2.11, 2.13): ``__call__(name,
    choices, input_nodes, layout, ...)``, ``do_autotuning(name, inputs_key, choices, ...)`` and the
    module's ``create_inputs_key``; else None."""
    cls = getattr(module, "AlgorithmSelectorCache", None)
    if cls is None or not callable(getattr(module, "create_inputs_key", None)):
        return None
    if not _takes(getattr(cls, "__call__", None), ("name", "choices", "input_nodes", "layout")) \
            or not _takes(getattr(cls, "do_autotuning", None), ("name", "inputs_key", "choices")):
        return None
    return cls


def _takes(function, names) -> bool:
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return False
    return all(name in parameters for name in names)


def preprocessed(selector, choices) -> list:
    """The choices after the selector's own filters (``preprocessing_fns``, 2.11+; none before), as
    Inductor runs them."""
    offered = list(choices)
    for preprocess in list(getattr(selector, "preprocessing_fns", ())):
        offered = list(preprocess(offered))
    return offered


def deterministic_choice(selector, offered):
    """Inductor's pick under ``config.deterministic`` (``pick_deterministic_choice``, 2.11+), or
    None when that config is off or this torch has no such pick."""
    from torch._inductor import config

    pick = getattr(selector, "pick_deterministic_choice", None)
    if not getattr(config, "deterministic", False) or not callable(pick):
        return None
    return pick(offered)


def is_extern(choice) -> bool:
    """Whether a choice is an aten call (``ExternKernelCaller``, 2.6+), not a template."""
    from torch._inductor import select_algorithm

    return isinstance(choice, select_algorithm.ExternKernelCaller)


def choice_label(choice) -> tuple[str, str]:
    """``(name, description)`` of a choice: ``triton_mm_17``, its template's config (2.6+)."""
    return str(getattr(choice, "name", "?")), str(getattr(choice, "description", "") or "")


def inputs_key(input_nodes) -> str:
    """Inductor's own key of a selection's inputs (``create_inputs_key``, 2.6+)."""
    from torch._inductor import select_algorithm

    return select_algorithm.create_inputs_key(input_nodes)


def choosing_call(signature, args: tuple, kwargs: dict, decide: bool):
    """``AlgorithmSelectorCache.__call__``'s arguments bound so that it returns its choice
    (``return_choice``, 2.11; 2.13 returns it unasked) and, when ``decide``, decides now rather than
    defer to benchmark fusion (``return_multi_template=False``, 2.11+); and ``split(result)`` ->
    (what the caller asked for, the choice or None)."""
    bound = signature.bind(*args, **kwargs)
    parameters = signature.parameters
    asked = bool(bound.arguments.get("return_choice", False))
    if "return_choice" in parameters:
        bound.arguments["return_choice"] = True
    if decide and "return_multi_template" in parameters:
        bound.arguments["return_multi_template"] = False
    unasked = "return_choice" in parameters and not asked

    def split(result):
        if isinstance(result, tuple) and len(result) == 2:
            return (result[0] if unasked else result), result[1]
        return result, None

    return bound, split


def tuning_of(signature, args: tuple, kwargs: dict) -> tuple:
    """``(name, inputs_key)`` of a ``do_autotuning`` call (2.11, 2.13)."""
    bound = signature.bind(*args, **kwargs).arguments
    return bound.get("name"), bound.get("inputs_key")


def benchmark_passes() -> int:
    """Inductor's count of template benchmark passes in this process
    (``counters["inductor"]["select_algorithm_autotune"]``, 2.6+)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["select_algorithm_autotune"])
