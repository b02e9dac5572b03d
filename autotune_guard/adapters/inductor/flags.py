"""Inductor's determinism configs, as the guard's derived mode reads them (``adapters.torch_flags``
names the reason; activation wires the two): ``batch_invariant`` and ``deterministic``.

Read from ``torch._inductor.config`` when the program has imported it (a value set in code
counts), else from the environment variable, as Inductor itself would read it. Never imports
Inductor (that would cost seconds at a first launch that may not need it)."""

from __future__ import annotations

import os
import sys


def flag(name: str, variable: str) -> bool:
    config = sys.modules.get("torch._inductor.config")
    if config is not None:  # the program may have set it in code: the module is the truth then
        try:
            return getattr(config, name, False) is True
        except Exception:
            return False
    return os.environ.get(variable) == "1"  # Inductor's own test (config.py: os.getenv(...) == "1")
