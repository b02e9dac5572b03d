"""What ``show`` and ``diff`` keep of thousands of files, reduced as each file is read (one at a
time): per (arch, kernel, key), one compact row per file that chose it (the file's index, the
config's text, how it was chosen, the timing summary as numbers), in arrays; never the files.

Read back key by key (``grouped``), a rank's several files that made the same choice count once
(the copy with timings kept), as they did when every file was read whole (``tests/whole_files.py``)."""

from __future__ import annotations

from array import array
from functools import partial

from ..core.model import TABLE, TIMED, Choice, ChoiceKey, is_fallback
from ..core.tables import PROVENANCE, added_by
from .configs import Signatures
from .table_facts import medians_of, verdict_of
from .reading import Source, natural_key, read_sources
from .timings import cost_order, median_of, min_cost_in, slowdown, summary, summary_values

# a row's flags: which of its numbers are known, and whether its entry held timings
_WINNER, _SPREAD, _COST, _FAILED, _TIMED = 1, 2, 4, 8, 16


class KeyRows:
    """The rows of one (arch, kernel, key), column by column (about 50 bytes a row)."""

    __slots__ = ("files", "sigs", "hows", "min_costs", "timed", "flags", "times")

    def __init__(self):
        self.files, self.sigs, self.hows = array("I"), array("I"), array("I")
        self.min_costs, self.timed, self.flags = array("i"), array("I"), bytearray()
        self.times = array("d")  # winner, fastest, slowest, min-cost: four a row

    def __len__(self) -> int:
        return len(self.files)


def digest_rows(kind: str, document: dict) -> dict:
    """What ``Rows.absorb`` needs of one file, computed where it was read (a worker): per entry
    ((arch, kernel, key), config, how, the timing summary as ``timings.summary_values`` gives it, whether it
    held timings), and per kernel the distinct provenance its entries give.  Plain data."""
    entries, provenance = [], {}
    if kind == "choices":
        for entry, value in document["log"].items():
            choice = Choice.parse(value)
            entries.append((tuple(ChoiceKey.parse(entry)), choice.signature, choice.how, _untimed(choice.signature), False))
        return {"entries": entries, "provenance": provenance}
    sigs, orders = Signatures(), {}
    arch = document["arch"]
    for kernel, keyed in document["kernels"].items():
        for key, entry in keyed.items():
            if kind == "table":  # its timings: the medians its entry's last measurement kept, where it kept one
                sig, timings = sigs.of(entry), medians_of(document, kernel, key)
                entries.append(((arch, kernel, key), sig, TABLE, summary_values(sig, timings, None), bool(timings)))
                continue
            sig = sigs.of(entry["config"])
            candidates = sigs.of_list(entry.get("candidates", []))
            order = orders.get((candidates, sig))
            if order is None:  # the cheapest first of the candidates and the config (cost_order)
                order = orders[candidates, sig] = cost_order({s: sigs.descriptors[s] for s in (*candidates, sig)})
            timings = entry.get("timings")
            entries.append(((arch, kernel, key), sig, str(entry.get("how", TIMED)),
                            summary_values(sig, timings, min_cost_in(order, timings)), bool(timings)))
            said = entry.get(PROVENANCE)
            if isinstance(said, dict) and said not in provenance.setdefault(kernel, []):
                provenance[kernel].append(said)
    return {"entries": entries, "provenance": {kernel: said for kernel, said in provenance.items() if said}}


def digest_details(kind: str, document: dict, wanted: frozenset) -> dict:
    """The whole entries of the keys ``wanted`` (the HTML page's shown and plotted columns) in one
    file: (arch, kernel, key) -> config, how, the timing summary, each candidate's median."""
    found = {}
    if kind == "choices":
        for entry, value in document["log"].items():
            ident = tuple(ChoiceKey.parse(entry))
            if ident in wanted:
                choice = Choice.parse(value)
                found[ident] = _details(choice.signature, choice.how, None, None)
        return found
    sigs, arch = Signatures(), document["arch"]
    for kernel, keyed in document["kernels"].items():
        for key, entry in keyed.items():
            if (arch, kernel, key) not in wanted:
                continue
            if kind == "table":
                found[arch, kernel, key] = _details(sigs.of(entry), TABLE, medians_of(document, kernel, key) or None,
                                                    None)
                continue
            sig, timings = sigs.of(entry["config"]), entry.get("timings")
            candidates = sigs.of_list(entry.get("candidates", []))
            order = cost_order({s: sigs.descriptors[s] for s in (*candidates, sig)})
            found[arch, kernel, key] = _details(sig, str(entry.get("how", TIMED)), timings, min_cost_in(order, timings))
    return found


def _details(sig: str, how: str, timings, min_cost) -> dict:
    return {"config": sig, "how": how, **summary(sig, timings, min_cost),
            "medians": {name: median_of(m) for name, m in (timings or {}).items()}}


class Details:
    """A fold of the whole entries of a few keys, by (key, file): the HTML page's second read."""

    def __init__(self, wanted):
        self.digest = partial(digest_details, wanted=frozenset(tuple(k) for k in wanted))
        self.found: dict[tuple, dict] = {}

    def absorb(self, source: Source, digested: dict) -> None:
        for ident, entry in digested.items():
            self.found[ident, source.path] = entry


def details_reader(sources, accept, command, jobs):
    """``details(keys)`` for the HTML page: the files of ``sources`` read again for those keys'
    whole entries only, so that a page of thousands of files never holds a file whole."""
    def details(keys):
        found = Details(keys)
        read_sources([s.path for s in sources], accept, command, all_runs=True, fold=found, jobs=jobs)
        return found.found
    return details


def _untimed(sig: str) -> tuple:
    return summary_values(sig, None, None)


class Rows:
    """Each file, as it is read, is reduced by ``digest`` (``digest_rows``) and added by
    ``absorb`` (``reading.read_sources(fold=...)``); then ``grouped``, ``counts`` and ``configs``
    read the rows of the files kept (the latest run, by default)."""

    digest = staticmethod(digest_rows)

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

    def absorb(self, source: Source, digested: dict) -> None:
        source.index = index = len(self.sources)
        self.sources.append(source)
        if digested["provenance"]:
            self.provenance[index] = digested["provenance"]
        for ident, sig, how, found, timed in digested["entries"]:
            rows = self.keys.get(ident)  # a ChoiceKey equals its plain tuple
            if rows is None:
                rows = self.keys[ChoiceKey(*ident)] = KeyRows()
            self._add(rows, index, sig, how, found, timed)

    def _add(self, rows: KeyRows, index: int, sig: str, how: str, found: tuple, timed: bool) -> None:
        winner, fastest, slowest, cost, min_cost, count, failed = found
        rows.files.append(index)
        rows.sigs.append(self._id(sig))
        rows.hows.append(self._id(how))
        rows.min_costs.append(-1 if min_cost is None else self._id(min_cost))
        rows.timed.append(count)
        rows.flags.append((_WINNER if winner is not None else 0) | (_SPREAD if fastest is not None else 0)
                          | (_COST if cost is not None else 0) | (_FAILED if failed else 0) | (_TIMED if timed else 0))
        rows.times.extend([winner or 0.0, fastest or 0.0, slowest or 0.0, cost or 0.0])

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

    def grouped(self, sources, only=None):
        """(key, [entry, ...]) for each key of the ``sources`` kept (of ``only``, given), in the
        report's key order: an entry is one file's choice as ``show`` lists it (one dict a row,
        built as it is read out)."""
        kept, voters = self._kept(sources), self._voters(sources)
        bases = {s.index: {"file": s.path, "label": s.label, "rank": s.rank, "kind": s.kind} for s in sources}
        for ident in sorted(self.keys if only is None else [k for k in self.keys if k in only], key=natural_key):
            rows = self.keys[ident]
            positions = self._positions(rows, kept, voters)
            if positions:
                yield ident, self._entries(rows, positions, bases, ident)

    def _entries(self, rows: KeyRows, positions: list[int], bases: dict, ident: ChoiceKey) -> list[dict]:
        # one loop with the columns in locals: 2 million rows (1,024 files) are read out in seconds
        files, sigs, hows, min_costs, timed, flags, times = (rows.files, rows.sigs, rows.hows, rows.min_costs,
                                                             rows.timed, rows.flags, rows.times)
        texts, sources, found = self.texts, self.sources, []
        for i in positions:
            flag, at = flags[i], 4 * i
            winner = times[at] if flag & _WINNER else None
            cost = times[at + 3] if flag & _COST else None
            spread = flag & _SPREAD
            source = sources[files[i]]
            found.append({**bases[files[i]], "config": texts[sigs[i]], "how": texts[hows[i]], "winner_ms": winner,
                          "fastest_ms": times[at + 1] if spread else None, "slowest_ms": times[at + 2] if spread else None,
                          "timed": timed[i], "min_cost": texts[min_costs[i]] if min_costs[i] >= 0 else None,
                          "min_cost_ms": cost, "min_cost_slowdown": slowdown(cost, winner) if cost is not None else None,
                          "min_cost_failed": bool(flag & _FAILED),
                          "added_by": added_by(source.document, ident.kernel, ident.key) if source.kind == "table"
                          else None,
                          "verdict": verdict_of(source.document, ident.kernel, ident.key) if source.kind == "table"
                          else None})
        return found

    def configs(self, sources) -> dict[ChoiceKey, set[str]]:
        """Per key of the files kept, the configs chosen (all ``diff`` compares)."""
        kept, found = self._kept(sources), {}
        for ident, rows in self.keys.items():
            sigs = {rows.sigs[i] for i, f in enumerate(rows.files) if kept[f]}
            if sigs:
                found[ident] = {self.texts[s] for s in sigs}
        return found

    def fallbacks(self, sources) -> dict[ChoiceKey, int]:
        """Per key, the choices of the files kept that an on-miss rule made (the tables lacked the key)."""
        kept, fell = self._kept(sources), {i for i, text in enumerate(self.texts) if is_fallback(text)}
        found = {ident: sum(1 for f, how in zip(rows.files, rows.hows) if kept[f] and how in fell)
                 for ident, rows in self.keys.items()}
        return {ident: n for ident, n in found.items() if n}

    def counts(self, sources) -> tuple[int, int, int]:
        """Keys, kernels and keys whose files disagree, among the files kept: decided before any
        output is written (``--check``'s status)."""
        configs = self.configs(sources)
        return (len(configs), len({(k.arch, k.kernel) for k in configs}),
                sum(len(sigs) > 1 for sigs in configs.values()))

    def provenance_documents(self, sources) -> list[dict]:
        """What ``show.provenance_lines`` reads of each file kept, without its entries."""
        found = []
        for s in sources:
            kernels = {kernel: {str(n): {PROVENANCE: p} for n, p in enumerate(said)}
                       for kernel, said in self.provenance.get(s.index, {}).items()}
            found.append({PROVENANCE: s.document.get(PROVENANCE), "kernels": kernels})
        return found
