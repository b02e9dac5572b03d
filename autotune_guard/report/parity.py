"""``report diff``'s numerics: the FP-fusion setting each kernel ran under in each run, and the
kernels both runs met under different ones (the same config gives other bits there). A kernel's
own setting comes from its record entries' provenance; else the process's, which every evidence
file of a guarded process carries (``numerics``). A run that says nothing is not compared."""

from __future__ import annotations

from ..core.numerics import FUSION, numerics_text
from ..core.tables import PROVENANCE


def side_numerics(sources, fold) -> tuple[dict, set]:
    """(kernel -> {(fusion, text)} from the entries' provenance, {(fusion, text)} of the processes)."""
    per_kernel: dict = {}
    processes: set = set()
    for s in sources:
        said = s.document.get("numerics")
        if isinstance(said, dict) and isinstance(said.get(FUSION), str):  # a file may hold anything there
            processes.add((said[FUSION], numerics_text(said)))
        table = s.document.get(PROVENANCE) if isinstance(s.document.get(PROVENANCE), dict) else {}
        for kernel, found in fold.provenance.get(s.index, {}).items():
            for p in [*found, table.get(kernel)]:
                if isinstance(p, dict) and isinstance(p.get(FUSION), str):
                    per_kernel.setdefault(kernel, set()).add((p[FUSION], numerics_text(p)))
    return per_kernel, processes


def differing(kernels, a: tuple[dict, set], b: tuple[dict, set]) -> list[dict]:
    """One row per kernel of ``kernels`` (met by both runs) whose FP fusion differs between them:
    ``{"kernel", "a": [texts], "b": [texts]}``."""
    rows = []
    for kernel in kernels:
        said = [side[0].get(kernel) or side[1] for side in (a, b)]
        if all(said) and {v for v, _ in said[0]} != {v for v, _ in said[1]}:
            rows.append({"kernel": kernel, "a": sorted(t for _, t in said[0]), "b": sorted(t for _, t in said[1])})
    return rows


def print_numerics(rows, out) -> None:
    for r in rows:
        print(f"  NUMERICS {r['kernel']}: A {' | '.join(r['a'])}; B {' | '.join(r['b'])}", file=out)
