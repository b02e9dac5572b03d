"""What one max-autotune template selection is called, keyed by and chooses among, as plain data,
and the pinned rule for it.

A selection is Inductor's ``AlgorithmSelectorCache(name, choices, input_nodes, layout)``: the
kernel is ``torch.compile template selection:<name>`` (``mm``, ``addmm``, ``convolution``,
``packed_linear``), the key is Inductor's own inputs key (``create_inputs_key``: device, dtype,
sizes, strides and offset of each input), the arch is the Triton arch for a CUDA/ROCm device and
the device type otherwise (``cpu``). Each choice is a descriptor ``{"kwargs": {"choice": text}}``
whose text is the choice's name without Inductor's process-wide counter (``triton_mm_17`` is
``triton_mm``) and its description (the template's config), so that it is the same in every
process that compiles the same graph on the same torch.
"""

from __future__ import annotations

import hashlib
import os
import re

from ...core.errors import SelectionError
from ...core.model import ChoiceKey, signature
from ...core.pinned import Pick
from ...core.pinned import pinned_pick as pinned_rule
from ...core.tables import PACKAGED_TABLES
from .state import state

KERNEL_PREFIX = "torch.compile template selection:"
_COUNTER = re.compile(r"_\d+$")


def kernel_name(op: str) -> str:
    return f"{KERNEL_PREFIX}{op}"


def arch_of(device_type: str, triton_arch) -> str:
    """A CUDA (or ROCm) device's Triton arch (``sm90``); other devices by their type (``cpu``)."""
    if device_type == "cuda" and triton_arch:
        return str(triton_arch)
    return device_type or "?"


def choice_text(name: str, description: str, extern: bool) -> str:
    """The stable text of one choice: an extern (aten) choice by its name, a template's name
    without its counter, with its description in parentheses when it has one."""
    base = name if extern else _COUNTER.sub("", name)
    description = (description or "").strip()
    return f"{base}({description})" if description else base


def descriptors(texts) -> list[dict]:
    """The choices' descriptors, in Inductor's order; texts that repeat get ``#1``, ``#2``... in order."""
    texts = list(texts)
    seen: dict[str, int] = {}
    out = []
    for text in texts:
        if texts.count(text) > 1:
            seen[text] = seen.get(text, 0) + 1
            text = f"{text}#{seen[text]}"
        out.append({"kwargs": {"choice": text}})
    return out


def deterministic_index(extern_flags) -> int:
    """Inductor's own deterministic choice (``pick_deterministic_choice``): the first extern (aten)
    choice, else the first one."""
    flags = list(extern_flags)
    return flags.index(True) if True in flags else 0


def pinned_pick(key: ChoiceKey, descs: list, extern_flags, entry, policy, rank: int = 0) -> Pick:
    """The pinned rule (``core.pinned``) for a template selection: the table's entry; else, with
    ``AUTOTUNE_ON_MISS=error``, a refusal naming the key; else Inductor's deterministic choice (aten
    where offered: a template selection has no static cost to rank by). ``AUTOTUNE_CHAOS`` shifts it."""
    try:
        return pinned_rule(descs, table_entry=entry, policy=policy, defaults={}, what=key.what(), rank=rank,
                           deterministic=deterministic_index(extern_flags), called="choice offered")
    except SelectionError as exc:  # a refusal names the first choices: their texts say what was offered
        listed = ", ".join(signature(d) for d in descs[:4]) + (", ..." if len(descs) > 4 else "")
        raise SelectionError(f"{exc} ({len(descs)} choices: {listed})") from None


def tables_fingerprint(table_path) -> str:
    """A hash of every table a pinned selection may read (``AUTOTUNE_TABLE_PATH`` and the packaged
    ones), by content: two processes with equal fingerprints pin every selection alike."""
    files = []
    for entry in (*table_path, PACKAGED_TABLES):
        if os.path.isdir(entry):
            files += sorted(os.path.join(entry, name) for name in os.listdir(entry) if name.endswith(".json"))
        elif os.path.isfile(entry):
            files.append(entry)
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{os.path.basename(path)}\0{_content_hash(path)}\0".encode())
    return digest.hexdigest()[:16]


def _content_hash(path: str) -> str:
    try:
        stat = os.stat(path)
        tag = (path, stat.st_size, stat.st_mtime_ns)
        hashed = state().hashed  # a table is read once per version of it
        if tag not in hashed:
            with open(path, "rb") as handle:
                hashed[tag] = hashlib.sha256(handle.read()).hexdigest()
        return hashed[tag]
    except OSError as exc:
        return f"unreadable {exc.errno}"
