"""``report show --format html`` and ``report diff --format html``: one self-contained page (inline
CSS, script and SVG; nothing fetched) with a summary line, a ranks x (kernel, key) grid coloured
by the chosen config (disagreements first, ranks grouped by node, alike ranks collapsed), each
cell's config and how it was chosen on hover and on click, and per key the candidates' measured
times across ranks with the winners and the min-cost config marked.  Every text from a file is
escaped: files are untrusted input."""

from __future__ import annotations

import math
from collections import Counter
from html import escape

from .. import __version__
from ..core.model import is_fallback
from . import html_model, html_tables
from .html_assets import CSS, ERROR_TRAP, OTHER_COLOUR, PALETTE, SCRIPT
from .html_model import Page, row_groups
from .html_svg import min_cost_text, strip_plot

MAX_PLOTS = html_model.MAX_PLOTS
MAX_FILES_LISTED = 24
KEYS_LABELLED = 12  # past it, the key headers are numbers (horizontal) and a numbered key list follows the grid


def show_page(sources, rows, details) -> str:
    """The page for ``report show``: ``rows`` the files' ``Rows``, ``details(keys)`` the whole
    entries of the keys the page shows (``html_model.build``); with a section on what each table
    read knows of its entries (``html_tables``)."""
    page = html_model.build([("", sources, rows)], details=details)
    return render(page, "autotune_guard report", [s.path for s in sources],
                  tables=html_tables.section(html_tables.table_entries(sources, rows)))


def diff_page(sides, folds, statuses: dict, details, numerics=()) -> str:
    """The page for ``report diff``: both runs' ranks in one grid, A's above B's; ``numerics``: the
    kernels both met under other numerics (``parity.differing``), said under the summary."""
    page = html_model.build([("A", sides[0], folds[0]), ("B", sides[1], folds[1])], statuses, details)
    return render(page, "autotune_guard diff", [s.path for side in sides for s in side], numerics_note(numerics))


class Palette:
    """A colour per config, the most chosen configs first; the rest share grey (letters are per key: ``Column.letters``)."""

    def __init__(self, page: Page, columns):
        counts = Counter()
        for i in columns:
            counts.update(page.columns[i].configs())
        self.counts = counts
        self.order = sorted(counts, key=lambda sig: (-counts[sig], sig))
        self.index = {sig: i for i, sig in enumerate(self.order[:len(PALETTE)])}

    def css_class(self, sig) -> str:
        return f"ag-p{self.index[sig]}" if sig in self.index else "ag-po"

    def colour(self, sig) -> str:
        return PALETTE[self.index[sig]] if sig in self.index else OTHER_COLOUR

    def style(self) -> str:
        rules = [f".ag-p{i}{{background:{c}}}" for i, c in enumerate(PALETTE)]
        return "\n".join(rules + [f".ag-po{{background:{OTHER_COLOUR};color:#333}}",
                                  ".ag-mix{background:repeating-linear-gradient(45deg,#555 0 3px,#bbb 3px 6px)}"])


def render(page: Page, title: str, paths: list, note: str = "", tables: str = "") -> str:
    """The page: ``note`` under the summary line, ``tables`` (``html_tables.section``) after the plots."""
    order = html_model.ordered_columns(page)
    shown = order[:html_model.MAX_COLUMNS]
    palette = Palette(page, shown)
    groups = row_groups(page)
    parts = ["<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
             f"<title>{escape(title)}</title><style>{CSS}{palette.style()}</style></head><body>",
             f"<div id=\"ag-errors\"></div><script>{ERROR_TRAP}</script><main>",
             f"<h1>{escape(title)}</h1>", summary_line(page), note, files_list(page, paths),
             legend(palette, _mixed(page, shown)), "<div class=\"ag-wrap\"><div class=\"ag-scroll\">",
             grid(page, shown, groups, palette), "</div>",
             "<aside id=\"ag-detail\"><b>Details</b>Click a cell: its ranks, config, how it was chosen, "
             "and what Triton measured.</aside></div>", key_list(page, shown),
             more_note(page, order, shown, groups), plots(page, order, palette), tables,
             f"<footer>written by autotune_guard {escape(__version__)} report; self-contained: "
             "no network, no external files.</footer></main>",
             f"<script>{SCRIPT}</script></body></html>\n"]
    return "".join(parts)


def _plural(n: int, word: str, many: str = "") -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def summary_line(page: Page) -> str:
    """Ranks, kernels, keys, disagreements, not governed: the line a reader takes away."""
    ranked = [r for r in page.rows if r.rank is not None]
    tables = len(page.rows) - len(ranked)
    kernels = len({(c.arch, c.kernel) for c in page.columns})
    disagree = sum(not c.agree for c in page.columns)
    if page.sides:
        who = " \u00b7 ".join(f"{side}: {_plural(sum(1 for r in ranked if r.side == side), 'rank')}"
                              for side, _ in page.sides)
        statuses = Counter(c.status for c in page.columns)
        what = ", ".join(f"{statuses[s]:,} {s}" for s in ("same", "changed", "same, ranks disagree", "only in A",
                                                           "only in B") if statuses[s] or s in ("same", "changed"))
        verdict = f"<b class=\"{'bad' if disagree else 'good'}\">{what}</b>"
    else:
        nodes = len({r.node for r in ranked})
        who = _plural(len(ranked), "rank") + (f" on {_plural(nodes, 'node')}" if ranked else "")
        if tables:
            who += f" + {_plural(tables, 'table')}"
        verdict = (f"<b class=\"bad\">{_plural(disagree, 'disagreement')}</b>" if disagree
                   else "<b class=\"good\">0 disagreements</b>")
    governed = f"<b class=\"bad\">{page.ungoverned:,} not governed</b>" if page.ungoverned else "0 not governed"
    fell = sum(1 for c in page.columns for cell in c.cells if cell for e in cell if is_fallback(e.get("how", "")))
    fell_text = f" \u00b7 <b class=\"bad\">{_plural(fell, 'fallback')} (keys the tables lacked)</b>" if fell else ""
    return (f"<p id=\"ag-summary\">{who} \u00b7 {_plural(kernels, 'kernel')} \u00b7 "
            f"{_plural(len(page.columns), 'key')} \u00b7 {verdict} \u00b7 {governed}{fell_text}</p>")


def numerics_note(rows) -> str:
    """The kernels both runs met under other numerics: the same config, other bits (FP fusion)."""
    if not rows:
        return ""
    items = "".join(f"<li><code>{escape(r['kernel'])}</code>: A {escape(' | '.join(r['a']))}; "
                    f"B {escape(' | '.join(r['b']))}</li>" for r in rows)
    return (f"<section id=\"ag-numerics\"><p><b class=\"bad\">{_plural(len(rows), 'kernel')} met under other "
            f"numerics (FP fusion)</b>: the same config gives other bits</p><ul>{items}</ul></section>")


def files_list(page: Page, paths: list) -> str:
    listed = "".join(f"<li><code>{escape(p)}</code></li>" for p in paths[:MAX_FILES_LISTED])
    more = f"<li>and {len(paths) - MAX_FILES_LISTED:,} more</li>" if len(paths) > MAX_FILES_LISTED else ""
    sides = "".join(f"<p>{escape(side)}: {_plural(len(files), 'file')}</p>" for side, files in page.sides)
    return (f"<details class=\"ag-files\"><summary>{_plural(len(paths), 'file')} read</summary>{sides}"
            f"<ul>{listed}{more}</ul></details>")


def legend(palette: Palette, mixed: bool) -> str:
    """One colour per config across the page; letters are per key (a: that key's most chosen, as
    in the text report). Only what the page shows is in it."""
    items = [f"<span title=\"{escape(sig)}\"><span class=\"sw {palette.css_class(sig)}\"></span>"
             f"<code>{escape(_short(sig, 60))}</code> <span class=\"ag-n\">{palette.counts[sig]:,}</span></span>"
             for sig in palette.order[:len(PALETTE)]]
    rest = palette.order[len(PALETTE):]
    if rest:
        items.append(f"<span><span class=\"sw ag-po\"></span>{_plural(len(rest), 'other config')}</span>")
    if mixed:
        items.append("<span><span class=\"sw ag-mix\"></span>a rank whose processes chose differently</span>")
    items.append("<span><span class=\"sw ag-po ag-fb\"></span>hatched: a fallback (the tables lacked the key)</span>")
    items.append("<span class=\"ag-n\">colour: the config, the same on every key; letter: a key's configs, "
                 "most chosen first (a, b, ...), as in the text report</span>")
    return f"<div class=\"ag-legend\" id=\"ag-legend\">{''.join(items)}</div>"


def _mixed(page: Page, shown) -> bool:
    return any(cell and len({e["config"] for e in cell}) > 1 for i in shown for cell in page.columns[i].cells)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def grid(page: Page, shown, groups, palette: Palette) -> str:
    head = [_key_header(page, shown)]
    body = []
    width = len(shown) + 1
    current = None
    for g_index, group in enumerate(groups[:html_model.MAX_ROW_GROUPS]):
        where = (group.side, tuple(group.nodes))
        if where != current:
            current = where
            body.append(f"<tr class=\"ag-node\"><th colspan=\"{width}\">{_node_label(page, group)}</th></tr>")
        body.append(_group_row(page, shown, group, g_index, palette))
    return (f"<table class=\"ag-grid\" id=\"ag-grid\"><thead>{''.join(head)}</thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _key_header(page: Page, shown) -> str:
    cells = ["<th class=\"ag-corner\">ranks \u2193 keys \u2192</th>"]
    for number, i in enumerate(shown, 1):
        c = page.columns[i]
        configs = c.configs()
        state = c.status or ("agree" if c.agree else f"DISAGREE: {len(configs)} configs")
        info = f"{c.kernel} [{c.key}] arch {c.arch}\n{state}" + (f"\nkey {number}" if len(shown) > KEYS_LABELLED else "")
        cls = "" if c.agree else " class=\"ag-dis\""
        name = c.kernel.rsplit(".", 1)[-1]
        label = (f"<div><b>{escape(name)}</b> {escape(c.key)}</div>" if len(shown) <= KEYS_LABELLED
                 else f"<span>{number}</span>")
        cells.append(f"<th id=\"ag-k{i}\"{cls} title=\"{escape(info)}\">{label}</th>")
    numbered = " ag-numbered" if len(shown) > KEYS_LABELLED else ""
    return f"<tr class=\"ag-keys{numbered}\">{''.join(cells)}</tr>"


def key_list(page: Page, shown) -> str:
    """Past ``KEYS_LABELLED`` keys, the headers are numbers: this list says which key each one is,
    read across, in columns (never a wall of vertical text)."""
    if len(shown) <= KEYS_LABELLED:
        return ""
    items = []
    for number, i in enumerate(shown, 1):
        c = page.columns[i]
        state = c.status or ("agree" if c.agree else "DISAGREE")
        cls = "" if c.agree else " class=\"ag-dis\""
        items.append(f"<li value=\"{number}\"{cls}><b>{escape(c.kernel.rsplit('.', 1)[-1])}</b> "
                     f"<code>{escape(_short(c.key, 80))}</code> <span class=\"ag-n\">{escape(state)}</span></li>")
    return f"<ol class=\"ag-keylist\" id=\"ag-keylist\">{''.join(items)}</ol>"


def _node_label(page: Page, group) -> str:
    side = f"{escape(group.side)}: " if group.side else ""
    if len(group.nodes) == 1:
        return f"{side}node <code>{escape(group.nodes[0])}</code>"
    return (f"{side}nodes <code>{escape(group.nodes[0])}</code> \u2026 <code>{escape(group.nodes[-1])}</code> "
            f"({len(group.nodes):,} nodes, every rank alike)")


def _group_row(page: Page, shown, group, g_index: int, palette: Palette) -> str:
    label = group.label(page.rows)
    n = len(group.members)
    count = f"<span class=\"ag-n\">({n:,} alike)</span>" if n > 1 else ""
    dissent = f"; differs from the reference config on {_plural(group.dissent, 'key')}" if group.dissent else ""
    cls = " class=\"ag-dissent\"" if group.dissent else ""
    title = f"{label} ({_plural(n, 'rank')} with the same choices){dissent}" if n > 1 else f"{label}{dissent}"
    cells = [f"<tr{cls}><th title=\"{escape(title)}\">{escape(label)}{count}</th>"]
    first = group.members[0]
    for i in shown:
        column = page.columns[i]
        cells.append(_cell(column.cells[first], column, i, palette, first))
    cells.append("</tr>")
    return "".join(cells)


def _cell(cell, column, column_index: int, palette: Palette, row: int) -> str:
    if not cell:
        return "<td class=\"ag-none\" title=\"no choice for this key\">\u00b7</td>"
    mode = column.reference_at(row)
    configs = sorted({e["config"] for e in cell})
    odd = " ag-x" if mode is not None and any(sig != mode for sig in configs) else ""
    changed = column.status == "changed" and column.sides[row] == "B" and set(configs) - column.side_configs("A")
    fell = any(is_fallback(e.get("how", "")) for e in cell)
    if len(configs) > 1:
        cls, code = "ag-mix", "*"
    else:
        cls, code = palette.css_class(configs[0]), column.letters[configs[0]]
    title = "\n".join(_entry_text(e) for e in cell)
    if fell:
        title += "\na fallback: the tables lacked this key, the AUTOTUNE_ON_MISS rule chose"
    if changed:
        title += f"\nchanged: run A chose {' | '.join(sorted(column.side_configs('A')))}"
    if odd:
        run = f" of run {column.sides[row]}" if column.sides else ""
        title += f"\nnot the reference config {mode} (the one most ranks{run} chose)"
    elif mode is None and not column.agree:
        title += "\nthe ranks tie: no config is the most chosen, so none is marked as differing"
    extra = odd + (" ag-chg" if changed else "") + (" ag-fb" if fell else "")
    return f"<td class=\"{cls}{extra}\" data-c=\"{column_index}\" title=\"{escape(title)}\">{code}</td>"


def _entry_text(e: dict) -> str:
    text = f"{e['config']}\nchosen: {e['how']}"
    if e["timed"]:
        text += f"\nwinner {_ms(e['winner_ms'])}; {e['timed']} timed, {_ms(e['fastest_ms'])}..{_ms(e['slowest_ms'])}"
    if e["min_cost_failed"]:
        text += f"\nmin-cost {e['min_cost']}: failed"
    elif e["min_cost_slowdown"] is not None:
        text += f"\nmin-cost {e['min_cost']}: {e['min_cost_slowdown']:.2f}x the winner"
    return text


def _ms(value) -> str:
    if value is None:
        return "?"
    return "failed" if not math.isfinite(value) else f"{value:.4g} ms"


def more_note(page: Page, order, shown, groups) -> str:
    notes = []
    hidden = order[len(shown):]
    if hidden:
        disagree = sum(not page.columns[i].agree for i in hidden)
        notes.append(f"and {_plural(len(hidden), 'more key')} not shown ({disagree:,} of them disagree); "
                     "disagreements come first. The JSON output (--json) holds every key.")
    rest = groups[html_model.MAX_ROW_GROUPS:]
    if rest:
        ranks = sum(len(g.members) for g in rest)
        dissent = sum(1 for g in rest if g.dissent)
        notes.append(f"and {_plural(len(rest), 'more row')} not shown ({_plural(ranks, 'rank')}, "
                     f"{dissent:,} of these rows differ from the most chosen configs).")
    return "".join(f"<p class=\"ag-more\">{escape(n)}</p>" for n in notes)


def plots(page: Page, order, palette: Palette) -> str:
    """Strip plots of the first keys with timings, disagreements first."""
    boxes, left = [], 0
    for i in order:
        column = page.columns[i]
        if len(boxes) >= MAX_PLOTS:
            left += column.timed
            continue
        svg = strip_plot(column, palette.colour, lambda sig, letters=column.letters: letters.get(sig, " "))
        if not svg:
            continue
        state = "agree" if column.agree else (column.status or "DISAGREE")
        cost = min_cost_text(column)
        boxes.append(f"<div class=\"ag-plotbox\"><h3>{escape(column.kernel)} <code>[{escape(column.key)}]</code> "
                     f"<span class=\"ag-n\">{escape(state)}</span></h3>{svg}"
                     + (f"<p>{escape(cost)}</p>" if cost else "") + "</div>")
    if not boxes:
        return ("<h2>Measured times</h2><p class=\"ag-more\">No timings in these files (choices files hold none; "
                "record files made under AUTOTUNE_RECORD_PATH do, and so do the tables consensus grew or merge "
                "--rule pooled wrote, for the entries whose measurement they kept).</p>")
    more = f"<p class=\"ag-more\">and {_plural(left, 'more key')} with timings not plotted.</p>" if left else ""
    return ("<h2>Measured times: each candidate's median per rank (filled: the candidate that rank chose)</h2>"
            f"<div class=\"ag-plots\" id=\"ag-plots\">{''.join(boxes)}</div>{more}")
