"""torch's own flags and the ecosystem's determinism switches: torch's version, and why (if at
all) the program asked for deterministic or batch-invariant execution.

Only read when the program imported torch itself (importing it here would cost a second); an
Inductor config module not imported yet is read as Inductor itself would read it, from its
environment variable."""

from __future__ import annotations

import os
import sys


def provide_facts(guard) -> None:
    guard.facts.provide("torch_version", torch_version)
    # Asked at the first launch: the reason text, or "" (core.settings.derived_mode).
    guard.facts.provide("torch_deterministic", determinism_reason)


def torch_version():
    return getattr(sys.modules.get("torch"), "__version__", None)


def deterministic() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch and torch.are_deterministic_algorithms_enabled())
    except Exception:
        return False


def determinism_reason() -> str:
    """The first determinism request found, as the words the log gives as the reason; "" when none.
    Each of these asks for the same numbers on every run and batch, which timing-based config
    choice cannot give: so each selects pinned when no AUTOTUNE_MODE was set."""
    # Batch-invariant first: Inductor turns torch's flag on under it, and it is what was asked for;
    # torch's flag before Inductor's deterministic, which torch.use_deterministic_algorithms sets.
    if _inductor_flag("batch_invariant", "TORCHINDUCTOR_BATCH_INVARIANT"):
        return "Inductor's batch_invariant config (torch._inductor.config.batch_invariant / TORCHINDUCTOR_BATCH_INVARIANT)"
    if deterministic():
        return "torch.are_deterministic_algorithms_enabled()"
    if _inductor_flag("deterministic", "TORCHINDUCTOR_DETERMINISTIC"):
        return "Inductor's deterministic config (torch._inductor.config.deterministic / TORCHINDUCTOR_DETERMINISTIC)"
    if _vllm_batch_invariant():
        return "vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT)"
    return ""


def _inductor_flag(name: str, variable: str) -> bool:
    config = sys.modules.get("torch._inductor.config")
    if config is not None:  # the program may have set it in code: the module is the truth then
        try:
            return getattr(config, name, False) is True
        except Exception:
            return False
    return os.environ.get(variable) == "1"  # Inductor's own test (config.py: os.getenv(...) == "1")


def _vllm_batch_invariant() -> bool:
    # vLLM reads it as an integer, non-zero meaning on (vllm/envs.py, csrc/core/batch_invariant.hpp).
    text = os.environ.get("VLLM_BATCH_INVARIANT", "").strip()
    try:
        return int(text) != 0
    except ValueError:
        return False
