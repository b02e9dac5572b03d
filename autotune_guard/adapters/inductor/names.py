"""What a kernel compiled by Inductor is called and keyed by, so that eager and compiled calls of
one kernel share one table entry and one choice-log entry.

A user kernel keeps its eager name ``module.function`` (matched with the kernels Dynamo saw, by
source) and Triton's tuning key, rebuilt from the runtime arguments because Inductor drops it
(pytorch #164124). An Inductor-generated kernel is ``inductor.<source hash>``, keyed by its size
hints: its own name is numbered in graph order. Also the one read of a generated program's
source: whether it launches a kernel with one literal key only (static shapes).
"""

from __future__ import annotations

import ast
import hashlib
import linecache
import logging
import re
import sys
from typing import Callable

from ...core.model import ChoiceKey, TuningKey, descriptor, key_text
from .state import state

logger = logging.getLogger("autotune_guard")

PACKAGE = __name__.rpartition(".")[0]  # frames of this adapter are skipped when looking for the program


class InductorKernel:
    """What the guard knows of one ``CachingAutotuner`` at its autotuning step. ``key_of`` is set for
    a user kernel whose tuning key reads runtime arguments: (their positions, args -> key text)."""

    __slots__ = ("choice_key", "descriptors", "meta_names", "key_of", "unmatched")

    def __init__(self, choice_key: ChoiceKey, descriptors: list, meta_names, key_of, unmatched: str | None):
        self.choice_key, self.descriptors, self.meta_names = choice_key, descriptors, meta_names
        self.key_of, self.unmatched = key_of, unmatched

    @property
    def qualified(self) -> str:
        return self.choice_key.kernel

    def parameters(self) -> set:
        return {name for desc in self.descriptors for name in desc["kwargs"]}


_PROGRAMS_KEPT = 16
_UNREAD = object()


def describe(autotuner, args, arch: str) -> InductorKernel:
    """Name, key and candidates of ``autotuner`` at its first launch with runtime ``args``."""
    fn = autotuner.fn
    source = getattr(fn, "src", "") or ""
    name = getattr(fn, "__name__", "kernel")
    meta_names = key_of = unmatched = None
    if getattr(autotuner, "custom_kernel", False):
        qualified, original = user_kernel(name, source, autotuner.inductor_meta.get("kernel_name"))
        if original is not None:
            meta_names = frozenset(n for c in original.configs for n in c.kwargs)
            key_of = key_builder(original.arg_names, original.keys, runtime_arg_names(autotuner),
                                 dict(autotuner.triton_meta.get("constants") or {}))
            key = key_of[1](args)
            if not key_of[0]:
                key_of = None  # every key argument is a compile-time constant: one key per compiled kernel
        else:
            key, unmatched = "*", name
    else:
        qualified = generated_name(name, source)
        key = size_hints_text(getattr(autotuner, "size_hints", None))
    descriptors = [project(launcher.config, meta_names) for launcher in autotuner.launchers]
    return InductorKernel(ChoiceKey(arch, qualified, key), descriptors, meta_names, key_of, unmatched)


def kernel_name(autotuner) -> tuple[str, str | None]:
    """The name ``describe`` gives ``autotuner``, and its function's name when it is a user kernel
    that matched none Dynamo saw (for the steps that only name a kernel)."""
    fn = autotuner.fn
    source, name = getattr(fn, "src", "") or "", getattr(fn, "__name__", "kernel")
    if not getattr(autotuner, "custom_kernel", False):
        return generated_name(name, source), None
    qualified, original = user_kernel(name, source, autotuner.inductor_meta.get("kernel_name"))
    return qualified, (name if original is None else None)


def key_builder(arg_names, keys, runtime_names: list, constants: dict) -> tuple[tuple, Callable]:
    """(positions of the runtime arguments the key reads, args -> key text): Triton's formula over
    the runtime arguments by name, with the constants Inductor folded in."""
    tuning = TuningKey(arg_names, keys)
    positions = tuple(i for i, name in enumerate(runtime_names) if name in tuning.keys)

    def text_of(args) -> str:
        values = dict(zip(runtime_names, args))
        values.update(constants)
        return key_text(tuning.of_values(values))

    return positions, text_of


def user_kernel(name: str, source: str, generated: str | None):
    """``(module.function, original autotuner or None)`` of a user kernel compiled by Inductor, matched
    by source with the kernels in Dynamo's side table (Inductor copies the source as it is). Not
    found: ``torch_compile.<Inductor's name>`` and None."""
    source_id = source_hash(source, name)
    caches = state()  # Dynamo's side table is scanned once per kernel source
    found = caches.user_kernels.get((name, source_id))
    if found is not None:
        return found
    found = _side_table_match(source_id) or (f"torch_compile.{generated or name}", None)
    with caches.lock:
        return caches.user_kernels.setdefault((name, source_id), found)


def _side_table_match(source_id: str):
    try:
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

        for kernel in list(kernel_side_table.id_to_kernel.values()):
            jit, autotuner = unwrap(kernel)
            if jit is None:
                continue
            jit_name = getattr(jit, "__name__", "")
            if source_hash(getattr(jit, "src", "") or "", jit_name) == source_id:
                return f"{getattr(jit, '__module__', '?')}.{jit_name}", autotuner
    except Exception as exc:  # a moved side table: the kernel is named by what Inductor calls it
        logger.debug("Dynamo's kernel side table could not be read: %r", exc)
    return None


def unwrap(kernel):
    """(JITFunction, Autotuner or None) of a kernel object Dynamo saw: an Autotuner, Heuristics
    wrapping one, or a bare JITFunction; (None, ...) when there is none."""
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
    function's own name: the same body hashes alike wherever it was generated."""
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
    """``inductor.<hash>`` of a kernel Inductor generated (``triton_red_fused_0`` is numbered in
    graph order, so it differs between programs and recompiles)."""
    return f"inductor.{source_hash(source, name)}"


def size_hints_text(size_hints) -> str:
    """The key of an Inductor-generated kernel: its size hints, ``x=64,r0_=4096``."""
    if isinstance(size_hints, dict):
        return ",".join(f"{k}={v}" for k, v in size_hints.items())
    if isinstance(size_hints, (list, tuple)):
        return ",".join(str(v) for v in size_hints)
    return "*"


def runtime_arg_names(autotuner) -> list:
    """Names of the positional arguments Inductor's launcher takes, in order."""
    for launcher in autotuner.launchers:
        names = getattr(launcher, "def_args", None)
        if names:
            return list(names)
    signature = autotuner.triton_meta.get("signature") or {}
    constants = autotuner.triton_meta.get("constants") or {}
    return [n for n, kind in signature.items() if kind != "constexpr" and n not in constants]


def project(config, meta_names) -> dict:
    """A config as the eager autotuner describes it: Dynamo folds ``@triton.heuristics`` values into
    the compiled configs, which eager candidates do not carry."""
    desc = descriptor(config)
    if meta_names is not None:
        desc["kwargs"] = {k: v for k, v in desc["kwargs"].items() if k in meta_names}
    return desc


def one_key_in_program(autotuner, positions: tuple) -> bool:
    """Whether the program launching ``autotuner`` passes its key arguments as the same literals at
    every call (``k.run(x, out, 16384, stream=...)``), so no per-key wrapper is needed. Read from the
    source of the calling generated module; anything unexpected answers False (follow the key)."""
    own = {getattr(c, "__module__", None) for c in type(autotuner).__mro__}
    frame = sys._getframe(1)
    while frame is not None and _is_own(frame.f_globals.get("__name__"), own):
        frame = frame.f_back
    if frame is None or frame.f_code.co_name == "<module>":  # e.g. autotuning at compile time
        return False
    names = {name for name, value in list(frame.f_globals.items()) if value is autotuner}
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


def _is_own(module: str | None, classes: set) -> bool:
    return module in classes or (module is not None and (module == PACKAGE or module.startswith(PACKAGE + ".")))


def _parsed(filename: str):
    """The parsed source of a generated program, once (one program launches many kernels)."""
    caches = state()
    programs = caches.programs
    tree = programs.get(filename, _UNREAD)
    if tree is not _UNREAD:
        return tree
    lines = linecache.getlines(filename)
    try:
        tree = ast.parse("".join(lines), filename) if lines else None
    except (SyntaxError, ValueError):
        tree = None
    with caches.lock:
        while len(programs) >= _PROGRAMS_KEPT:
            programs.pop(next(iter(programs)))
        programs[filename] = tree
    return tree
