"""The kernel libraries' own switches: variables users set that decide whether a library times,
pins, or reads a cache of its own. Read where set (``in_force``), said at start-up with how each
combines with the guard's mode (``startup_line``), carried in the evidence files (``switches``).
A batch-invariance switch also wakes the guard (``autotune_guard.pth``, ``_boot.wakes``) and
selects pinned as a determinism request does (``adapters.torch_flags``). Pure: an environment in."""

from __future__ import annotations

from typing import Mapping

from .store_url import hide_password
from .terminal import on_one_line

BATCH_INVARIANT = "VLLM_BATCH_INVARIANT"
INDUCTOR_BATCH_INVARIANT = "TORCHINDUCTOR_BATCH_INVARIANT"  # Inductor reads it as == "1" (torch/_inductor/config.py)
OFF = ("", "0", "false", "no", "off")
AITER_SUFFIX = "_TRITON_AUTOTUNE"  # aiter's <FAMILY>_TRITON_AUTOTUNE: a family's run-time tuning opted in
# name -> (what it does, how it meets a table the guard pins from)
KNOWN = {
    BATCH_INVARIANT: ("vLLM's batch-invariant kernels", None),
    INDUCTOR_BATCH_INVARIANT: ("Inductor's batch-invariant kernels", None),
    "FLA_CACHE_MODE": ("fla's CachedAutotuner reads its configs from its own JSON cache",
                       "those configs bypass the table: logged as library, named in pinned mode "
                       "(refused with AUTOTUNE_ON_MISS=error)"),
    "HELION_ASSERT_CACHE_HIT": ("Helion raises on a miss of its own config cache",
                                "Helion's kernels are governed: a table's entry is a hit; a search the mode would run is refused"),
    "FLAGGEMS_DB_URL": ("FlagGems' LibTuner keeps its winners in this database (last write wins)",
                        "pinned and consensus decide governed keys without reading or writing it; "
                        "auto and record hide its earlier winners"),
    "LIGER_FUSED_MOE_AUTOTUNE": ("Liger's fused MoE kernels autotune at run time through Triton's autotuner",
                                 "governed like every Triton autotuner"),
}


def in_force(environ: Mapping[str, str]) -> dict[str, str]:
    """The switches set to something other than off, by name, in name order, each as it may be said:
    a URL's password hidden (``FLAGGEMS_DB_URL=postgresql://user:***@db/tune``), since the values go to
    the log and into every evidence file."""
    names = [n for n in environ if n in KNOWN or (n.endswith(AITER_SUFFIX) and not n.startswith("AUTOTUNE_"))]
    return {n: _said(environ[n]) for n in sorted(names) if _on(n, environ[n])}


def _said(value: str) -> str:
    return hide_password(value) if "://" in value else value


def batch_invariant(value: str) -> bool:
    """vLLM reads ``VLLM_BATCH_INVARIANT`` as an integer, non-zero meaning on (vllm/envs.py)."""
    try:
        return int(value.strip()) != 0
    except ValueError:
        return False


# A switch read by its library's own rule; any other is on unless it says off.
RULES = {
    BATCH_INVARIANT: batch_invariant,
    INDUCTOR_BATCH_INVARIANT: lambda value: value == "1",  # torch/_inductor/config.py
    "HELION_ASSERT_CACHE_HIT": lambda value: value == "1",  # helion/autotuner/base_cache.py
}
WAKES = (BATCH_INVARIANT, INDUCTOR_BATCH_INVARIANT)  # switches that wake the guard without AUTOTUNE_*


def _on(name: str, value: str) -> bool:
    rule = RULES.get(name)
    return rule(value) if rule is not None else value.strip().lower() not in OFF


def wakes(environ: Mapping[str, str]) -> bool:
    """A batch-invariance switch on, by its library's rule: it asks for what a determinism request does."""
    return any(name in environ and _on(name, environ[name]) for name in WAKES)


def _mode_words(mode: str | None, mode_from: str | None, derived: str) -> str:
    if mode_from == derived:
        return "no AUTOTUNE_MODE: pinned, from this request, at the first launch"
    if mode == "pinned":
        return "pinned already"
    return f"AUTOTUNE_MODE={mode} wins: the kernels are timed, so a batch may meet another config"


def combined(name: str, mode: str | None, mode_from: str | None, derived: str) -> str:
    """How one switch in force combines with the guard's mode, in words."""
    if name in (BATCH_INVARIANT, INDUCTOR_BATCH_INVARIANT):
        return f"{KNOWN[name][0]}: {_mode_words(mode, mode_from, derived)}"
    if name in KNOWN:
        return f"{KNOWN[name][0]}; {KNOWN[name][1]}"
    family = name[: -len(AITER_SUFFIX)]
    return f"aiter's {family} kernels autotune at run time through Triton's autotuner; governed (mode {mode})"


def startup_line(found: Mapping[str, str], mode: str | None, mode_from: str | None, derived: str) -> str:
    """One line: each switch in force with its value and how it combines with the mode."""
    said = [f"{name}={on_one_line(value)} ({combined(name, mode, mode_from, derived)})" for name, value in found.items()]
    return "library switches in force: " + "; ".join(said)


def shown(found: Mapping) -> str:
    """``NAME=value, ...`` for the report (values from a file: control characters escaped)."""
    return ", ".join(f"{on_one_line(str(name))}={on_one_line(_said(str(value)))}" for name, value in found.items())
