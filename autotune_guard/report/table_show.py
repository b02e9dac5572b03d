"""``report show`` of tables: what each entry's table knows beside its config (who added it, the
verdict and its margin, the pooled verdict, the history), in the text, markdown and JSON outputs,
and the one-line notes naming the parts of a table that cannot be used. Kept apart from
``show.py``, which lays out every kind of file alike."""

from __future__ import annotations

import os
import sys

from ..core.terminal import on_one_line
from .reading import md
from .table_facts import entry_facts, file_notes, history_phrase, superseded_of

NOTE = "python -m autotune_guard.report: note:"


def say_notes(sources, err=None) -> int:
    """Each unusable part of the tables among ``sources``, one line each on stderr; how many."""
    count = 0
    for s in sources:
        if s.kind == "table":
            for note in file_notes(s.path, s.document):
                print(f"{NOTE} {on_one_line(note)}", file=err or sys.stderr)
                count += 1
    return count


def table_documents(sources) -> dict:
    """path -> the (header of the) document of each table among ``sources``."""
    return {s.path: s.document for s in sources if s.kind == "table"}


def entry_lines(documents: dict, row: dict, e: dict) -> list[str]:
    """The lines under a table's entry in the text report: its history and a pending retune."""
    document = documents.get(e["file"]) if e["kind"] == "table" else None
    if document is None:
        return []
    facts = entry_facts(document, row["kernel"], row["key"], e["config"])
    lines = []
    said = history_phrase(facts.history)
    if said:
        lines.append(f"      history: {said}")
    if facts.retune:
        lines.append("      retune asked: the next consensus run times this key again")
    return lines


def superseded_text(document: dict) -> str | None:
    """``2 superseded kernel versions kept (...)`` for a table's line in the report; None without any."""
    found = superseded_of(document)
    if not found:
        return None
    return (f"{len(found)} superseded kernel version{'s' * (len(found) != 1)} kept "
            "(report prune --superseded drops them)")


def tables_json(sources, rows) -> list[dict]:
    """``show --json``'s ``tables``: per table, each entry's facts (``table_facts.Facts``), the
    kernel versions it keeps as superseded and the notes on its unusable parts."""
    tables = [s for s in sources if s.kind == "table"]
    found = {s.path: [] for s in tables}
    for key, entries in rows.grouped(tables):
        for e in entries:
            document = next(s.document for s in tables if s.path == e["file"])
            found[e["file"]].append(entry_facts(document, key.kernel, key.key, e["config"]).as_json())
    return [{"file": s.path, "arch": s.arch, "entries": found[s.path], "superseded": superseded_of(s.document),
             "notes": file_notes(s.path, s.document)} for s in tables]


def print_markdown(sources, analysed, out) -> None:
    """A section per table: each entry's config, who added it, its verdict and its history."""
    documents = table_documents(sources)
    if not documents:
        return
    lines = []
    for r in analysed():
        for e in r["choices"]:
            if e["kind"] != "table":
                continue
            facts = entry_facts(documents[e["file"]], r["kernel"], r["key"], e["config"])
            bad = f"<br>left out: {md('; '.join(facts.problems))}" if facts.problems else ""
            lines.append(f"| {md(os.path.basename(e['file']))} | {md(r['kernel'])} | {md(r['key'])} | {md(e['config'])} "
                         f"| {_cell(facts.added_by)} | {_cell(facts.verdict)}{bad} | {_cell(history_phrase(facts.history))} |")
    if lines:
        print("\n#### What the tables know of each entry\n", file=out)
        print("| table | kernel | key | config | added | verdict | history |\n|---|---|---|---|---|---|---|", file=out)
        print("\n".join(lines), file=out)


def _cell(text) -> str:
    return md(text) if text else "—"
