"""The report's results computed the plain way, from every file read whole: what ``show``,
``diff``, ``merge`` and the HTML page gave before they streamed, kept as the reference that
``test_report_scale.py`` holds the streamed results to.  Test code only."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from autotune_guard.core.model import Choice, ChoiceKey, signature
from autotune_guard.report.configs import full_descriptor
from autotune_guard.report.reading import Source, natural_key
from autotune_guard.report.rows import digest_rows
from autotune_guard.report.timings import cost_order, min_cost_in, summary


@dataclass
class Chosen:
    """What one file says one rank chose for one (arch, kernel, key)."""

    source: Source
    key: ChoiceKey
    choice: Choice
    config: dict | None = None  # records only
    timings: dict | None = None  # signature -> Triton's measurements (median first)
    candidates: list = field(default_factory=list)  # declared configs, as descriptors

    @property
    def signature(self) -> str:
        return self.choice.signature

    @property
    def how(self) -> str:
        return self.choice.how


def choices_of(source: Source) -> list[Chosen]:
    doc = source.document
    if source.kind == "table":
        return [Chosen(source, ChoiceKey(doc["arch"], kernel, key), Choice(signature(full_descriptor(desc)), "table"))
                for kernel, entries in doc["kernels"].items() for key, desc in entries.items()]
    if source.kind == "record":
        found = []
        for kernel, entries in doc["kernels"].items():
            for key, entry in entries.items():
                config = full_descriptor(entry["config"])
                found.append(Chosen(source, ChoiceKey(doc["arch"], kernel, key),
                                    Choice(signature(config), str(entry.get("how", "timed"))), config,
                                    entry.get("timings"), [full_descriptor(c) for c in entry.get("candidates", [])]))
        return found
    return [Chosen(source, ChoiceKey.parse(entry), Choice.parse(value)) for entry, value in doc["log"].items()]


def grouped(sources) -> dict[ChoiceKey, list[Chosen]]:
    """Choices per (arch, kernel, key); a rank's several files that made the same choice count
    once (the copy with timings kept); ranks of different runs each count."""
    groups: dict[ChoiceKey, dict] = {}
    for source in sources:
        for chosen in choices_of(source):
            kept = groups.setdefault(chosen.key, {})
            same = (source.kind, source.document.get("run_id"), source.attempt, source.rank, chosen.signature)
            if same not in kept or (chosen.timings and not kept[same].timings):
                kept[same] = chosen
    return {key: list(groups[key].values()) for key in sorted(groups, key=natural_key)}


def timing_summary(chosen: Chosen) -> dict:
    """``timings.summary`` of one choice: min-cost among its candidates and its own config."""
    descriptors = {signature(c): c for c in chosen.candidates}
    if chosen.config is not None:
        descriptors.setdefault(chosen.signature, chosen.config)
    return summary(chosen.signature, chosen.timings, min_cost_in(cost_order(descriptors), chosen.timings))


def marking_digest(kind: str, document: dict, marks: str) -> dict:
    """``Rows.digest``, leaving a file ``<pid>-<rank>-<its pid>`` in ``marks``: which process read what."""
    open(f"{marks}/{os.getpid()}-{document['rank']}-{document.get('pid')}", "w").close()
    return digest_rows(kind, document)


def dying_digest(kind: str, document: dict) -> dict:
    """``Rows.digest`` until the worker meets a file of rank 7: then the process ends at once, as
    one killed would."""
    if document["rank"] == 7:
        os._exit(3)
    return digest_rows(kind, document)
