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
from typing import Callable

from ...core.model import ChoiceKey, TuningKey, descriptor, key_text
from . import seam
from .state import state

logger = logging.getLogger("autotune_guard")


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
    name, source = seam.kernel_source(autotuner)
    meta_names = key_of = unmatched = None
    if seam.is_user_kernel(autotuner):
        qualified, original = user_kernel(name, source, seam.inductor_name(autotuner))
        if original is not None:
            meta_names, arg_names, keys = seam.eager_tuning(original)
            key_of = key_builder(arg_names, keys, seam.runtime_arg_names(autotuner), seam.folded_constants(autotuner))
            key = key_of[1](args)
            if not key_of[0]:
                key_of = None  # every key argument is a compile-time constant: one key per compiled kernel
        else:
            key, unmatched = "*", name
    else:
        qualified = generated_name(name, source)
        key = size_hints_text(seam.size_hints_of(autotuner))
    descriptors = [project(seam.launcher_config(launcher), meta_names) for launcher in seam.launchers_of(autotuner)]
    return InductorKernel(ChoiceKey(arch, qualified, key), descriptors, meta_names, key_of, unmatched)


def kernel_name(autotuner) -> tuple[str, str | None]:
    """The name ``describe`` gives ``autotuner``, and its function's name when it is a user kernel
    that matched none Dynamo saw (for the steps that only name a kernel)."""
    name, source = seam.kernel_source(autotuner)
    if not seam.is_user_kernel(autotuner):
        return generated_name(name, source), None
    qualified, original = user_kernel(name, source, seam.inductor_name(autotuner))
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
        for kernel in seam.traced_kernels():
            jit, autotuner = seam.unwrap(kernel)
            if jit is None:
                continue
            jit_name, jit_source, jit_module = seam.jit_identity(jit)
            if source_hash(jit_source, jit_name) == source_id:
                return f"{jit_module}.{jit_name}", autotuner
    except Exception as exc:  # a moved side table: the kernel is named by what Inductor calls it
        logger.debug("Dynamo's kernel side table could not be read: %r", exc)
    return None


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
    program = seam.launching_program(autotuner)
    if program is None:
        return False
    names, filename = program
    tree = _parsed(filename)
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
