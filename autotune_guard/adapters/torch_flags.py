"""torch's own flags: its version and whether the program asked for deterministic algorithms.

Only read when the program imported torch itself (importing it here would cost a second)."""

from __future__ import annotations

import sys


def provide_facts(guard) -> None:
    guard.facts.provide("torch_version", torch_version)
    guard.facts.provide("torch_deterministic", deterministic)


def torch_version():
    return getattr(sys.modules.get("torch"), "__version__", None)


def deterministic() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch and torch.are_deterministic_algorithms_enabled())
    except Exception:
        return False
