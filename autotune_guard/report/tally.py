"""What ``merge`` needs of thousands of record files, kept as they are read (one file at a
time): per (arch, kernel, key) the ranks that chose each config (a bit per voter), the
candidates, Triton's medians (``--rule fastest``) and what the guard's selections measured
(``--rule pooled``); never the files themselves.

A voter is (run, attempt, rank): several processes' files of one rank that made the same choice
count once, as ``Rows.grouped`` counts them."""

from __future__ import annotations

from array import array
from functools import partial

from ..core.model import ChoiceKey
from ..core.tables import PROVENANCE
from .configs import Signatures
from .reading import Source, natural_key
from .timings import median_of


class KeyTally:
    """One (arch, kernel, key): voters per signature, the first file and how, the candidates."""

    __slots__ = ("voters", "how", "first", "candidates", "raw_candidates", "measured", "timed", "library")

    def __init__(self):
        self.voters: dict[str, int] = {}  # signature -> bit mask of voter ids
        self.how: dict[str, str] = {}
        self.first: dict[str, str] = {}  # signature -> the first file that chose it
        self.candidates: set[str] = set()
        self.raw_candidates = None  # the last candidate list seen, to skip recomputing an equal one
        self.measured: dict[str, array] = {}  # signature -> medians (--rule fastest)
        self.timed: dict[str, int] = {}  # chosen signature -> voters whose timings counted
        self.library = False  # some file says its library chose this key's config itself

    def votes(self) -> dict[str, int]:
        return {sig: bin(mask).count("1") for sig, mask in self.voters.items()}


def digest_records(kind: str, document: dict, timings: bool = False) -> dict:
    """What ``Tally.absorb`` needs of one record, computed where the file was read (a worker):
    per entry (kernel, key, config, how, candidates, and with ``timings`` Triton's medians), the
    file's configs once each, and its kernels' provenance.  Plain data: it travels by pickle."""
    sigs = Signatures()
    entries = []
    for kernel, keyed in document["kernels"].items():
        for key, entry in keyed.items():
            sig = sigs.of(entry["config"])
            candidates = sigs.of_list(entry.get("candidates") or [])
            how = str(entry.get("how", "timed"))
            measured = entry.get("timings") if timings and how != "library" else None
            medians = tuple((name, median_of(value)) for name, value in measured.items()) if measured else None
            entries.append((kernel, key, sig, how, candidates, medians))
    # what the guard's selection measured (a consensus claimer's record; docs/winners.md): kept with the table
    kept = {(kernel, key): entry["measured"] for kernel, keyed in document["kernels"].items()
            for key, entry in keyed.items() if isinstance(entry.get("measured"), dict)}
    return {"entries": entries, "descriptors": sigs.descriptors, "provenance": provenance_from_records([document]),
            "measured": kept}


class Tally:
    """Each record, as it is read, is reduced by ``digest`` (``digest_records``) and added by
    ``absorb`` (``reading.read_sources(fold=...)``); ``keys(sources)`` then gives the tallies
    of the files kept (the latest run and attempt, by default)."""

    def __init__(self, timings: bool):
        self.timings = timings
        self.digest = partial(digest_records, timings=timings)  # a function and a flag: cheap to send to a worker
        self.groups: dict[tuple, dict[ChoiceKey, KeyTally]] = {}
        self.descriptors: dict[str, dict] = {}  # signature -> config, shared by every key
        self._voter_ids: dict[tuple, int] = {}
        self.provenance: dict = {}  # kernel -> what its entries were recorded against (core.tables)
        self.selections: dict = {}  # (run, attempt) -> (kernel, key) -> each record's selection summary (deciding.retime)

    def absorb(self, source: Source, digested: dict) -> None:
        doc = source.document
        group = (doc.get("run_id"), source.attempt)
        tallies = self.groups.setdefault(group, {})
        bit = 1 << self._voter_ids.setdefault((*group, source.rank), len(self._voter_ids))
        arch = doc["arch"]
        for kernel, said in digested["provenance"].items():
            self.provenance.setdefault(kernel, said)
        for kernel_key, said in digested.get("measured", {}).items():
            self.selections.setdefault(group, {}).setdefault(kernel_key, []).append(said)
        for sig, desc in digested["descriptors"].items():
            self.descriptors.setdefault(sig, desc)
        for kernel, key, sig, how, candidates, medians in digested["entries"]:
            tally = tallies.get((arch, kernel, key))  # a ChoiceKey equals its plain tuple
            if tally is None:
                tally = tallies[ChoiceKey(arch, kernel, key)] = KeyTally()
            if candidates is not tally.raw_candidates:
                tally.raw_candidates = candidates
                tally.candidates.update(candidates)
            if how == "library":
                tally.library = True
                continue
            tally.voters[sig] = tally.voters.get(sig, 0) | bit
            tally.how.setdefault(sig, how)
            tally.first.setdefault(sig, source.path)
            if medians and not tally.timed.get(sig, 0) & bit:
                tally.timed[sig] = tally.timed.get(sig, 0) | bit
                for measured, median in medians:
                    tally.measured.setdefault(measured, array("d")).append(median)

    def selections_of(self, sources: list[Source]) -> dict[tuple, list]:
        """(kernel, key) -> what each record of the groups ``sources`` belong to measured (one per process)."""
        found: dict[tuple, list] = {}
        for group in sorted({(s.document.get("run_id"), s.attempt) for s in sources}, key=str):
            for kernel_key, said in self.selections.get(group, {}).items():
                found.setdefault(kernel_key, []).extend(said)
        return found

    def keys(self, sources: list[Source], arch: str) -> dict[ChoiceKey, KeyTally]:
        """The tallies of the groups ``sources`` belong to, for ``arch``, in the report's key order."""
        groups = {(s.document.get("run_id"), s.attempt) for s in sources}
        found: dict[ChoiceKey, KeyTally] = {}
        for group in groups:
            for ident, tally in self.groups.get(group, {}).items():
                if ident.arch != arch:
                    continue
                found[ident] = _combined(found[ident], tally) if ident in found else tally
        return {ident: found[ident] for ident in sorted(found, key=natural_key)}


def _combined(a: KeyTally, b: KeyTally) -> KeyTally:
    """Two runs' tallies of one key (``--all-runs``): their voters differ, so masks just join."""
    for sig, mask in b.voters.items():
        a.voters[sig] = a.voters.get(sig, 0) | mask
        a.how.setdefault(sig, b.how[sig])
        a.first.setdefault(sig, b.first[sig])
    a.candidates |= b.candidates
    for sig, values in b.measured.items():
        a.measured.setdefault(sig, array("d")).extend(values)
    a.library = a.library or b.library
    return a


def provenance_from_records(documents, found: dict | None = None) -> dict:
    """kernel -> provenance for a merged table (added to ``found``): each kernel's first recorded
    one (records of one kernel made against other source or candidates: ``show.provenance_lines``)."""
    found = {} if found is None else found
    for document in documents:
        for kernel, entries in (document.get("kernels") or {}).items():
            for entry in entries.values():
                if isinstance(entry, dict) and isinstance(entry.get(PROVENANCE), dict):
                    found.setdefault(kernel, entry[PROVENANCE])
    return found
