"""What the HTML report shows, as plain data: one row per rank (or table) of each side, one column
per (arch, kernel, key), each cell the entries a row holds for that column; then the aggregation
that keeps a page of 1,024 ranks x 2,000 keys small (runs of ranks that chose alike collapse into
one row, nodes that chose alike into one block, the columns and rows shown are capped)."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property


MAX_COLUMNS = 48  # keys shown in full; the rest are counted
MAX_ROW_GROUPS = 160  # collapsed rows shown; the rest are counted
MAX_PLOTS = 16  # keys with timings plotted
_HOST_IN_NAME = re.compile(r"\.rank\d+\.([A-Za-z0-9_-]+)-\d+\.json$")


@dataclass
class Row:
    """One rank of one side (or one table file)."""

    name: str  # "rank 3", "table sm90.json"
    node: str
    rank: int | None = None
    side: str = ""  # "A" / "B" on a diff page


@dataclass
class Column:
    """One (arch, kernel, key): per row, the entries that row holds (several when a rank's
    processes chose differently), or None where the row has none."""

    arch: str
    kernel: str
    key: str
    cells: list
    status: str = ""  # diff: same / changed / only in A / ...
    timed: bool = False  # some entry holds Triton's measurements (the column can be plotted)
    sides: tuple = ()  # a diff page's side of each row ("A", "B"): each run is compared within itself

    @cached_property
    def counts(self) -> Counter:
        """How many entries chose each config (a column is built once, then only read)."""
        return Counter(e["config"] for cell in self.cells if cell for e in cell)

    def configs(self) -> Counter:
        return self.counts

    @property
    def agree(self) -> bool:
        return len(self.configs()) <= 1 and self.status in ("", "same")

    @cached_property
    def reference(self):
        """The reference config: the one most rows chose. None for an empty column, and on a tie
        (no rank is the one that differs there)."""
        return _most_chosen(self.counts)

    @cached_property
    def side_references(self) -> dict:
        """A diff page's reference per run: a rank differs from its own run's ranks, never from a
        pool of both runs (A against B is the column's status, as in the text diff)."""
        found = {}
        for side in set(self.sides):
            found[side] = _most_chosen(Counter(e["config"] for cell, at in zip(self.cells, self.sides)
                                               if cell and at == side for e in cell))
        return found

    def reference_at(self, row: int):
        """The config the cell of ``row`` is compared with."""
        return self.side_references[self.sides[row]] if self.sides else self.reference

    def side_configs(self, side: str) -> set:
        """The configs one run's rows chose (a diff page)."""
        return {e["config"] for cell, at in zip(self.cells, self.sides) if cell and at == side for e in cell}

    @cached_property
    def letters(self) -> dict:
        """A letter per config of this key, most chosen first, as the text report marks them (a, b, ...)."""
        ordered = sorted(self.counts, key=lambda sig: (-self.counts[sig], sig))
        return {sig: chr(ord("a") + i) if i < 26 else "+" for i, sig in enumerate(ordered)}


def _most_chosen(counts: Counter):
    if not counts:
        return None
    top = max(counts.values())
    tied = [sig for sig, n in counts.items() if n == top]
    return tied[0] if len(tied) == 1 else None


@dataclass
class Page:
    rows: list[Row]
    columns: list[Column]
    sides: list = field(default_factory=list)  # (side name, [file paths]) on a diff page
    ungoverned: int = 0


def node_of(source) -> str:
    host = source.document.get("host")
    if isinstance(host, str) and host:
        return host
    match = _HOST_IN_NAME.search(os.path.basename(source.path))
    return match.group(1) if match else "(host unknown)"


def build(sections, statuses=None, details=None) -> Page:
    """``sections``: (side name, sources, their ``rows.Rows``) triples, one with side "" for
    ``show``, A and B for ``diff``; ``statuses``: diff's status per (arch, kernel, key).

    Every cell first holds its configs only (one shared dict a config: a page of 1,024 ranks x
    2,000 keys stays small); ``details(keys)`` then gives the whole entries (how, timings,
    medians) of the keys shown and plotted, by (key, file): a second read of just those keys."""
    rows, cells_by_key, timed, ungoverned, files = [], {}, set(), set(), []
    shared: dict[str, dict] = {}  # config -> the one dict every cell that chose it holds
    for side, sources, folded in sections:
        index, row_of = {}, {}
        for source in sorted(sources, key=_row_order):
            ident = _row_ident(source)
            if ident not in index:
                index[ident] = len(rows)
                name = source.label if source.kind == "table" else f"rank {source.rank}"
                rows.append(Row(name, "tables" if source.kind == "table" else node_of(source),
                                None if source.kind == "table" else source.rank, side))
            row_of[source.path] = index[ident]
            ungoverned.update(_ungoverned_of(source))
        files.append((folded, sources, row_of))
        _configs_of(folded, sources, row_of, (cells_by_key, timed, ungoverned, shared))
    sides = tuple(row.side for row in rows) if statuses is not None else ()
    columns = [Column(key.arch, key.kernel, key.key, [tuple(cells[i]) if i in cells else None for i in range(len(rows))],
                      (statuses or {}).get(tuple(key), ""), key in timed, sides) for key, cells in cells_by_key.items()]
    page = Page(rows, columns, [(side, [s.path for s in sources]) for side, sources, _ in sections if side],
                len(ungoverned))
    if details is not None:
        _fill_details(page, files, details)
    return page


def _configs_of(folded, sources, row_of, into) -> None:
    cells_by_key, timed, ungoverned, shared = into
    for key, entries in folded.grouped(sources):
        cells = cells_by_key.setdefault(key, {})
        for e in entries:
            light = shared.get(e["config"]) or shared.setdefault(e["config"], {"config": e["config"]})
            cells.setdefault(row_of[e["file"]], []).append(light)
            if e["timed"]:
                timed.add(key)
            if e["how"] == "library":
                ungoverned.add(key.kernel)


def needed_columns(page: Page) -> list[int]:
    """The columns whose whole entries the page shows: those in the grid and those plotted."""
    order = ordered_columns(page)
    plotted = [i for i in order if page.columns[i].timed][:MAX_PLOTS]
    return sorted(set(order[:MAX_COLUMNS]) | set(plotted))


def _fill_details(page: Page, files, details) -> None:
    wanted = {(c.arch, c.kernel, c.key): c for c in (page.columns[i] for i in needed_columns(page))}
    found = details(set(wanted))  # (key, file) -> entry
    cells: dict[tuple, dict[int, list]] = {key: {} for key in wanted}
    for folded, sources, row_of in files:
        for key, entries in folded.grouped(sources, only=set(wanted)):
            for e in entries:
                cells[key].setdefault(row_of[e["file"]], []).append(found[key, e["file"]])
    for key, column in wanted.items():
        column.cells = [tuple(cells[key][i]) if i in cells[key] else None for i in range(len(page.rows))]


def _row_ident(source):
    return ("table", source.path) if source.kind == "table" else (source.kind, source.document.get("run_id"), source.rank)


def _row_order(source):
    return (source.kind == "table", source.rank if source.rank is not None else -1, source.path)


def _ungoverned_of(source) -> set:
    """Kernels a file names as not governed, where it names any (an object or a list of names)."""
    found = source.document.get("ungoverned")
    if isinstance(found, (dict, list)):
        return {str(name) for name in found}
    return set()


# --- aggregation ----------------------------------------------------------------------------------

def ordered_columns(page: Page) -> list[int]:
    """Column indexes, disagreements first (the most dissenting rows first), each group in key order."""
    dissent = {i: _dissenting_rows(c) for i, c in enumerate(page.columns)}
    return sorted(range(len(page.columns)), key=lambda i: (page.columns[i].agree, -dissent[i], i))


def _dissenting_rows(column: Column) -> int:
    """Rows that differ from their reference (a tie: nobody differs)."""
    return sum(1 for r, cell in enumerate(column.cells) if cell and (mode := column.reference_at(r)) is not None
               and any(e["config"] != mode for e in cell))


@dataclass
class RowGroup:
    """Rows shown as one line: consecutive ranks of one side and node (or consecutive nodes) whose
    choices are the same on every key."""

    side: str
    nodes: list
    members: list  # row indexes
    dissent: int = 0  # keys on which these rows differ from the column's reference config

    def label(self, rows) -> str:
        ranks = [rows[i].rank for i in self.members]
        if None in ranks:
            return rows[self.members[0]].name
        if len(ranks) == 1:
            return f"rank {ranks[0]}"
        return f"ranks {rank_ranges(ranks)}"


def rank_ranges(ranks) -> str:
    """``0–3, 8, 10–11``."""
    parts, start, prev = [], None, None
    for r in sorted(ranks):
        if start is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}\u2013{prev}")
        start = prev = r
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}\u2013{prev}")
    return ", ".join(parts[:6]) + (f", \u2026 ({len(parts) - 6} more runs)" if len(parts) > 6 else "")


def row_groups(page: Page) -> list[RowGroup]:
    """The rows, grouped by side and node, runs of alike rows collapsed; then consecutive nodes
    that are each one such run, alike, merged."""
    prints = [tuple(_cell_print(c.cells[r]) for c in page.columns) for r in range(len(page.rows))]
    refs: dict[str, list] = {}  # per side, each column's reference (a diff page compares each run within itself)
    groups: list[RowGroup] = []
    for r, row in enumerate(page.rows):
        last = groups[-1] if groups else None
        if last and last.side == row.side and last.nodes[-1] == row.node and prints[last.members[0]] == prints[r]:
            last.members.append(r)
            continue
        modes = refs.get(row.side) or refs.setdefault(row.side, [c.reference_at(r) for c in page.columns])
        dissent = sum(1 for c, mode in zip(prints[r], modes) if c is not None and mode is not None and c != (mode,))
        groups.append(RowGroup(row.side, [row.node], [r], dissent))
    per_node = Counter((row.side, row.node) for row in page.rows)
    merged: list[RowGroup] = []
    for g in groups:
        prev = merged[-1] if merged else None
        whole = prev is not None and _whole_node(prev, per_node) and _whole_node(g, per_node)
        if whole and prev.side == g.side and prints[prev.members[0]] == prints[g.members[0]] \
                and g.nodes[0] not in prev.nodes:
            prev.nodes.extend(g.nodes)
            prev.members.extend(g.members)
        else:
            merged.append(g)
    return merged


def _cell_print(cell):
    if not cell:
        return None
    return (cell[0]["config"],) if len(cell) == 1 else tuple(sorted({e["config"] for e in cell}))


def _whole_node(group: RowGroup, per_node: Counter) -> bool:
    """The group holds every row of its node(s) (one run covers the node)."""
    return sum(per_node[(group.side, node)] for node in group.nodes) == len(group.members)
