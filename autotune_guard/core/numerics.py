"""What decides a config's bits beside the config: the effective FP-fusion setting (a fused
multiply-add rounds once, a multiply then an add twice), kept in a kernel's provenance so that a
table entry recorded under other numerics is named. Pure: the Triton adapter reads the settings.

A provenance without ``fp_fusion`` (a table made before this field) is not compared: nothing says
what it was made under, and ``report show`` says "FP fusion not recorded"."""

from __future__ import annotations

from typing import Mapping

FUSION = "fp_fusion"  # in a provenance: "on" or "off", the effective setting
FUSION_BY = "fp_fusion_by"  # in a provenance: what decided it, in words
DEFAULT_VAR = "TRITON_DEFAULT_FP_FUSION"
FORCE_VAR = "TRITON_FORCE_DISABLE_FP_FUSION"


def fp_fusion(force_disable: bool, default: bool, requested, environ: Mapping, triton: str | None) -> dict:
    """The effective FP fusion as Triton's compiler decides it (``knobs.language.fp_fusion_enabled``):
    off when forced off, else the kernel's own ``enable_fp_fusion`` where it gave one, else the
    default; with the setting that decided it."""
    if force_disable:
        return {FUSION: "off", FUSION_BY: f"{FORCE_VAR}={environ.get(FORCE_VAR, '1')}"}
    if requested is not None:
        return {FUSION: _on(requested), FUSION_BY: f"the kernel's enable_fp_fusion={bool(requested)}"}
    if environ.get(DEFAULT_VAR) is not None:
        return {FUSION: _on(default), FUSION_BY: f"{DEFAULT_VAR}={environ[DEFAULT_VAR]}"}
    return {FUSION: _on(default), FUSION_BY: f"{DEFAULT_VAR} unset: Triton {triton or '?'}'s default"}


def _on(value) -> str:
    return "on" if value else "off"


def numerics_differences(recorded: Mapping, live: Mapping) -> list[str]:
    """Phrases naming each numerics setting that differs between a recorded provenance and the
    live kernel's; [] where either side does not say (an old table)."""
    then, now = recorded.get(FUSION), live.get(FUSION)
    if not then or not now or then == now:
        return []
    return [f"FP fusion {then} when recorded ({recorded.get(FUSION_BY) or 'how not recorded'}), "
            f"{now} now ({live.get(FUSION_BY) or '?'})"]


def numerics_text(recorded: Mapping) -> str:
    """``FP fusion on (TRITON_DEFAULT_FP_FUSION=1)`` for ``report show``; says so where not recorded."""
    if not recorded.get(FUSION):
        return "FP fusion not recorded"
    by = recorded.get(FUSION_BY)
    return f"FP fusion {recorded[FUSION]}" + (f" ({by})" if by else "")


def numerics_message(kernel: str, differs: list[str]) -> str:
    """The line that names a table recorded under other numerics: its configs give other bits here."""
    return (f"kernel {kernel}: its table entries were recorded under other numerics ({'; '.join(differs)}): "
            "the same config gives other bits; record and merge it again under these settings, or run "
            "under the recorded ones")
