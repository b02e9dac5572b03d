"""What ``show`` and ``diff`` keep of thousands of files, reduced as each file is read (one at a
time): per (arch, kernel, key), one compact row per file that chose it (the file's index, the
config's text, how it was chosen, the timing summary as numbers), in arrays; never the files.

Read back key by key (``grouped``) the rows are what ``reading.grouped`` gives of whole files:
a rank's several files that made the same choice count once (the copy with timings kept)."""

from __future__ import annotations

from array import array
from typing import NamedTuple

from ..core.model import Choice, ChoiceKey, signature
from ..core.tables import PROVENANCE
from .reading import Source, full_descriptor, natural_key
from .timings import cost_order, min_cost_in, slowdown, summary

# a row's flags: which of its numbers are known, and whether its entry held timings
_WINNER, _SPREAD, _COST, _FAILED, _TIMED = 1, 2, 4, 8, 16


class Row(NamedTuple):
    """One file's choice for one key, as read back."""

    source: Source
    signature: str
    how: str
    summary: dict  # timings.summary's fields


class KeyRows:
    """The rows of one (arch, kernel, key), column by column (about 50 bytes a row)."""

    __slots__ = ("files", "sigs", "hows", "min_costs", "timed", "flags", "times", "raw", "descs", "order")

    def __init__(self):
        self.files, self.sigs, self.hows = array("I"), array("I"), array("I")
        self.min_costs, self.timed, self.flags = array("i"), array("I"), bytearray()
        self.times = array("d")  # winner, fastest, slowest, min-cost: four a row
        self.raw = None  # the last candidate list seen, to skip recomputing an equal one
        self.descs: dict = {}
        self.order: list = []

    def __len__(self) -> int:
        return len(self.files)


class Rows:
    """``fold`` each file as it is read (``reading.read_sources(fold=...)``); then ``grouped``,
    ``counts`` and ``configs`` read the rows of the files kept (the latest run, by default)."""

    def __init__(self):
        self.keys: dict[ChoiceKey, KeyRows] = {}
        self.texts: list[str] = []  # configs, hows and min-cost configs, each text once
        self._ids: dict[str, int] = {}
        self.sources: list[Source] = []
        self.provenance: dict[int, dict[str, list]] = {}  # file index -> kernel -> what its entries say

    def _id(self, text: str) -> int:
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = len(self.texts)
            self.texts.append(text)
        return found

    def _rows(self, ident: ChoiceKey) -> KeyRows:
        rows = self.keys.get(ident)
        if rows is None:
            rows = self.keys[ident] = KeyRows()
        return rows

    def fold(self, source: Source) -> None:
        source.index = len(self.sources)
        self.sources.append(source)
        doc = source.document
        if source.kind == "choices":
            for entry, value in doc["log"].items():
                choice = Choice.parse(value)
                self._add(self._rows(ChoiceKey.parse(entry)), source.index, choice.signature, choice.how,
                          summary(choice.signature, None, None), False)
            return
        for kernel, entries in doc["kernels"].items():
            for key, entry in entries.items():
                rows = self._rows(ChoiceKey(doc["arch"], kernel, key))
                if source.kind == "table":
                    sig = signature(full_descriptor(entry))
                    self._add(rows, source.index, sig, "table", summary(sig, None, None), False)
                else:
                    self._record_entry(rows, source.index, kernel, entry)

    def _record_entry(self, rows: KeyRows, index: int, kernel: str, entry: dict) -> None:
        config = full_descriptor(entry["config"])
        sig = signature(config)  # recomputed, not read: it is what show and diff compare
        candidates = entry.get("candidates", [])
        if candidates != rows.raw:
            rows.raw = candidates
            rows.descs = {signature(c): c for c in map(full_descriptor, candidates)}
            rows.order = cost_order(rows.descs)
        order = rows.order if sig in rows.descs else cost_order({**rows.descs, sig: config})
        timings = entry.get("timings")
        self._add(rows, index, sig, str(entry.get("how", "timed")), summary(sig, timings, min_cost_in(order, timings)),
                  bool(timings))
        said = entry.get(PROVENANCE)
        if isinstance(said, dict):
            kept = self.provenance.setdefault(index, {}).setdefault(kernel, [])
            if said not in kept:
                kept.append(said)

    def _add(self, rows: KeyRows, index: int, sig: str, how: str, s: dict, timed: bool) -> None:
        rows.files.append(index)
        rows.sigs.append(self._id(sig))
        rows.hows.append(self._id(how))
        rows.min_costs.append(-1 if s["min_cost"] is None else self._id(s["min_cost"]))
        rows.timed.append(s["timed"])
        rows.flags.append((_WINNER if s["winner_ms"] is not None else 0) | (_SPREAD if s["fastest_ms"] is not None else 0)
                          | (_COST if s["min_cost_ms"] is not None else 0) | (_FAILED if s["min_cost_failed"] else 0)
                          | (_TIMED if timed else 0))
        rows.times.extend([s["winner_ms"] or 0.0, s["fastest_ms"] or 0.0, s["slowest_ms"] or 0.0, s["min_cost_ms"] or 0.0])

    def _kept(self, sources) -> bytearray:
        kept = bytearray(len(self.sources))
        for s in sources:
            if 0 <= s.index < len(kept):
                kept[s.index] = 1
        return kept

    def _positions(self, rows: KeyRows, kept: bytearray, voters) -> list[int]:
        """The rows of kept files; with ``voters`` (file index -> voter), one per voter and config."""
        positions = [i for i, f in enumerate(rows.files) if kept[f]]
        if voters is None:
            return positions
        first: dict = {}
        for i in positions:
            same = (voters[rows.files[i]], rows.sigs[i])
            j = first.get(same)
            if j is None or (rows.flags[i] & _TIMED and not rows.flags[j] & _TIMED):
                first[same] = i
        return list(first.values())

    def _voters(self, sources):
        """File index -> (kind, run, attempt, rank), or None when no voter has two files."""
        voters = {s.index: (s.kind, s.document.get("run_id"), s.attempt, s.rank) for s in sources}
        return voters if len(set(voters.values())) < len(voters) else None

    def grouped(self, sources):
        """(key, [Row, ...]) for each key of the ``sources`` kept, in the report's key order."""
        kept, voters = self._kept(sources), self._voters(sources)
        for ident in sorted(self.keys, key=natural_key):
            rows = self.keys[ident]
            positions = self._positions(rows, kept, voters)
            if positions:
                yield ident, [self._row(rows, i) for i in positions]

    def _row(self, rows: KeyRows, i: int) -> Row:
        flags, times, texts = rows.flags[i], rows.times, self.texts
        winner = times[4 * i] if flags & _WINNER else None
        cost = times[4 * i + 3] if flags & _COST else None
        found = {"winner_ms": winner, "fastest_ms": times[4 * i + 1] if flags & _SPREAD else None,
                 "slowest_ms": times[4 * i + 2] if flags & _SPREAD else None, "timed": rows.timed[i],
                 "min_cost": texts[rows.min_costs[i]] if rows.min_costs[i] >= 0 else None, "min_cost_ms": cost,
                 "min_cost_slowdown": slowdown(cost, winner) if cost is not None else None,
                 "min_cost_failed": bool(flags & _FAILED)}
        return Row(self.sources[rows.files[i]], texts[rows.sigs[i]], texts[rows.hows[i]], found)

    def configs(self, sources) -> dict[ChoiceKey, set[str]]:
        """Per key of the files kept, the configs chosen (all ``diff`` compares)."""
        kept, found = self._kept(sources), {}
        for ident, rows in self.keys.items():
            sigs = {rows.sigs[i] for i, f in enumerate(rows.files) if kept[f]}
            if sigs:
                found[ident] = {self.texts[s] for s in sigs}
        return found

    def counts(self, sources) -> tuple[int, int, int]:
        """Keys, kernels and keys whose files disagree, among the files kept: decided before any
        output is written (``--check``'s status)."""
        configs = self.configs(sources)
        return (len(configs), len({(k.arch, k.kernel) for k in configs}),
                sum(len(sigs) > 1 for sigs in configs.values()))

    def provenance_documents(self, sources) -> list[dict]:
        """What ``core.tables.provenance_lines`` reads of each file kept, without its entries."""
        found = []
        for s in sources:
            kernels = {kernel: {str(n): {PROVENANCE: p} for n, p in enumerate(said)}
                       for kernel, said in self.provenance.get(s.index, {}).items()}
            found.append({PROVENANCE: s.document.get(PROVENANCE), "kernels": kernels})
        return found
