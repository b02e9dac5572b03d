"""The decision engine: one ``decide`` that carries out every mode for every autotuner family.

A family (Triton's ``Autotuner``, FlagGems' ``LibTuner``, Inductor's tuning step and its template
selection, ...) describes one pending choice as a :class:`Tunable`: its key, its live candidates,
its provenance and how to tune them. :func:`decide` answers with a :class:`Decision`: which
candidate, how it was chosen (pinned, timed, consensus, table), and, when this process tuned, what
the tuning launch returned. The family applies it through :func:`first_launch`, the one rule of a
key's first launch, saying how to apply candidate i (pin the config, keep the launcher).

This package sits on the runtime layer: it imports ``runtime`` and ``core``; adapters import it.
"""

from .engine import Decision, Tunable, Tuned, decide, noted, pinned, selected, table_index
from .first import first_launch
from .table_checks import check_table_provenance

__all__ = ["Decision", "Tunable", "Tuned", "check_table_provenance", "decide", "first_launch", "noted", "pinned",
           "selected",
           "table_index"]
