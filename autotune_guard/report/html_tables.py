"""The HTML page's section on tables: per table file read, each entry's config, who added it, its
verdict and margin (pooled where it was pooled) and its history, and the notes naming the parts of
the table that cannot be used. A table is what every later run pins: the page shows what it
knows of each entry, not only its config. Every text from a file is escaped."""

from __future__ import annotations

from html import escape

from ..core.model import ChoiceKey, signature
from .configs import full_descriptor
from .reading import natural_key
from .table_facts import entry_facts, file_notes, history_phrase, superseded_of

MAX_ENTRIES = 400  # entries listed per table; the rest counted (--json lists every one)
DASH = "\u2014"


def table_entries(sources, rows=None) -> list[tuple]:
    """(path, document, [(kernel, key, config), ...]) of each table among ``sources``, in the
    report's key order: from their rows (``rows.Rows``), or without ``rows`` from the documents
    themselves (read whole: ``reading.read_sources`` without a fold)."""
    tables = [s for s in sources if s.kind == "table"]
    found = {s.path: [] for s in tables}
    if rows is None:
        for s in tables:
            entries = [(ChoiceKey(s.arch, kernel, key), signature(full_descriptor(desc)))
                       for kernel, keyed in s.document["kernels"].items() for key, desc in keyed.items()]
            found[s.path] = [(k.kernel, k.key, sig) for k, sig in sorted(entries, key=lambda e: natural_key(e[0]))]
    else:
        for ident, entries in rows.grouped(tables):
            for e in entries:
                found[e["file"]].append((ident.kernel, ident.key, e["config"]))
    return [(s.path, s.document, found[s.path]) for s in tables]


def section(tables: list[tuple]) -> str:
    """The section, or "" where no table was read."""
    if not tables:
        return ""
    parts = ["<h2>Tables: what each entry knows</h2><section id=\"ag-tables\">"]
    for path, document, entries in tables:
        parts.append(_table(path, document, entries))
    parts.append("</section>")
    return "".join(parts)


def _table(path: str, document: dict, entries: list) -> str:
    facts = [entry_facts(document, kernel, key, config) for kernel, key, config in entries]
    measured = sum(f.measured is not None and f.measured["how"] is not None for f in facts)
    pooled = sum(f.measured is not None and f.measured["pooled"] is not None for f in facts)
    superseded = superseded_of(document)
    counts = f"{len(facts):,} entr{'y' if len(facts) == 1 else 'ies'} \u00b7 {measured:,} with a verdict \u00b7 " \
             f"{pooled:,} pooled" + (f" \u00b7 {len(superseded):,} superseded kernel versions kept" if superseded else "")
    notes = "".join(f"<li>{escape(note)}</li>" for note in file_notes(path, document))
    rows = "".join(_row(f) for f in facts[:MAX_ENTRIES])
    more = f"<p class=\"ag-more\">and {len(facts) - MAX_ENTRIES:,} more entries (--json lists every one).</p>" \
        if len(facts) > MAX_ENTRIES else ""
    return (f"<h3><code>{escape(path)}</code></h3><p class=\"ag-more\">{counts}</p>"
            + (f"<ul class=\"ag-notes\">{notes}</ul>" if notes else "")
            + "<table class=\"ag-known\"><thead><tr><th>kernel</th><th>key</th><th>config</th><th>added</th>"
              "<th>verdict</th><th>history</th></tr></thead>"
            + f"<tbody>{rows}</tbody></table>{more}")


def _row(f) -> str:
    verdict = escape(f.verdict or "no verdict kept")
    if f.problems:
        verdict += f"<br><span class=\"bad\">left out: {escape('; '.join(f.problems))}</span>"
    if f.retune:
        verdict += "<br>retune asked: the next consensus run times this key again"
    return (f"<tr><td><code>{escape(f.kernel)}</code></td><td><code>{escape(f.key)}</code></td>"
            f"<td><code>{escape(f.config)}</code></td><td>{escape(f.added_by or DASH)}</td><td>{verdict}</td>"
            f"<td>{escape(history_phrase(f.history) or DASH)}</td></tr>")
