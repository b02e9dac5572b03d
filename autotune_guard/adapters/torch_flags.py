"""torch's own flags and the ecosystem's determinism switches: torch's version, and why (if at
all) the program asked for deterministic or batch-invariant execution.

Only read when the program imported torch itself (importing it here would cost a second).
Inductor's configs are the Inductor adapter's to read (``adapters.inductor.flags``): activation
hands its reader in as ``inductor_flag``."""

from __future__ import annotations

import os
import sys

from ..core import switches


def provide_facts(guard, inductor_flag=None) -> None:
    """``inductor_flag(name, variable)``: whether Inductor's config ``name`` is on (None: not read)."""
    guard.facts.provide("torch_version", torch_version)
    # Asked at the first launch: the reason text, or "" (core.settings.derived_mode).
    guard.facts.provide("torch_deterministic", lambda: determinism_reason(inductor_flag))


def torch_version():
    return getattr(sys.modules.get("torch"), "__version__", None)


def deterministic() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch and torch.are_deterministic_algorithms_enabled())
    except Exception:
        return False


def determinism_reason(inductor_flag=None) -> str:
    """The first determinism request found, as the words the log gives as the reason; "" when none.
    Each of these asks for the same numbers on every run and batch, which timing-based config
    choice cannot give: so each selects pinned when no AUTOTUNE_MODE was set."""
    # Batch-invariant first: Inductor turns torch's flag on under it, and it is what was asked for;
    # torch's flag before Inductor's deterministic, which torch.use_deterministic_algorithms sets.
    inductor_flag = inductor_flag or (lambda name, variable: False)
    if inductor_flag("batch_invariant", "TORCHINDUCTOR_BATCH_INVARIANT"):
        return "Inductor's batch_invariant config (torch._inductor.config.batch_invariant / TORCHINDUCTOR_BATCH_INVARIANT)"
    if deterministic():
        return "torch.are_deterministic_algorithms_enabled()"
    if inductor_flag("deterministic", "TORCHINDUCTOR_DETERMINISTIC"):
        return "Inductor's deterministic config (torch._inductor.config.deterministic / TORCHINDUCTOR_DETERMINISTIC)"
    if _vllm_batch_invariant():
        return "vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT)"
    return ""


def _vllm_batch_invariant() -> bool:
    return switches.batch_invariant(os.environ.get(switches.BATCH_INVARIANT, ""))
