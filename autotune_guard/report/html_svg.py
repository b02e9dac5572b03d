"""Per (kernel, key): the candidates' measured medians across ranks as an inline-SVG strip plot,
one line per candidate, one dot per rank, the dot of the candidate a rank chose filled in its
config's colour; and what the min-cost config would have cost. Bounded: at most ``MAX_CANDIDATES``
lines and ``MAX_POINTS`` dots per line (an even sample of the ranks)."""

from __future__ import annotations

import math
import statistics
from html import escape

MAX_CANDIDATES = 10
MAX_POINTS = 120
WIDTH, LEFT, RIGHT, LINE, TOP = 720, 230, 160, 18, 22


def candidate_times(column) -> dict:
    """signature -> [(median ms, chosen by that row)], one pair per row that has timings."""
    found: dict = {}
    for cell in column.cells:
        entry = next((e for e in cell or () if e["medians"]), None)
        if entry is None:
            continue
        for sig, ms in entry["medians"].items():
            found.setdefault(sig, []).append((ms, sig == entry["config"]))
    return found


def _sample(points: list) -> list:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    return [points[int(i * step)] for i in range(MAX_POINTS)]


def _typical(points) -> float:
    finite = [ms for ms, _ in points if math.isfinite(ms)]
    return statistics.median(finite) if finite else math.inf


def min_cost_text(column) -> str:
    """``min-cost BLOCK=16,...: 1.32x the winner (median of 3 ranks, 1.10x-1.52x)``, where known."""
    entries = [e for cell in column.cells for e in (cell or ())[:1] if e["min_cost"]]
    if not entries:
        return ""
    names = sorted({e["min_cost"] for e in entries})
    slow = sorted(e["min_cost_slowdown"] for e in entries if e["min_cost_slowdown"] is not None)
    failed = sum(1 for e in entries if e["min_cost_failed"])
    parts = []
    if slow:
        spread = f", {slow[0]:.2f}x\u2013{slow[-1]:.2f}x" if len(slow) > 1 else ""
        parts.append(f"{statistics.median(slow):.2f}x the winner (median of {len(slow)} "
                     f"rank{'s' * (len(slow) != 1)}{spread})")
    if failed:
        parts.append(f"failed on {failed} rank{'s' * (failed != 1)}")
    return f"min-cost {' / '.join(names)}: " + ("; ".join(parts) if parts else "not measured")


def strip_plot(column, colour_of, code_of) -> str:
    """The SVG for one column, or "" when no row has timings."""
    times = candidate_times(column)
    if not times:
        return ""
    order = sorted(times, key=lambda sig: (_typical(times[sig]), sig))
    shown, hidden = order[:MAX_CANDIDATES], len(order) - MAX_CANDIDATES
    finite = [ms for sig in shown for ms, _ in times[sig] if math.isfinite(ms)]
    scale = _scale(finite)
    span = WIDTH - LEFT - RIGHT
    common = _common_parts(shown)
    notes = ([f"every candidate: {','.join(common)}"] if common else []) + \
        ([f"+{hidden} more candidates, slower"] if hidden > 0 else [])
    height = TOP + LINE * len(shown) + 6 + 15 * len(notes)
    min_cost = {e["min_cost"] for cell in column.cells for e in (cell or ()) if e["min_cost"]}
    parts = [f'<svg class="ag-plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" role="img">',
             f'<title>{escape(column.kernel)} [{escape(column.key)}]: measured medians per candidate, '
             f'one dot per rank</title>']
    parts += _axis(scale, span, height)
    for i, sig in enumerate(shown):
        parts += _candidate_line(sig, _differing(sig, common), times[sig], TOP + LINE * i + LINE / 2, scale, span,
                                 colour_of, code_of, sig in min_cost)
    for n, note in enumerate(notes):
        y = TOP + LINE * len(shown) + 15 * (n + 1)
        parts.append(f'<text x="4" y="{y}" class="ag-note">{escape(_short(note, 110))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _scale(finite: list) -> tuple[float, float]:
    """The axis's (low, high): the measured range with a margin, not from 0 ms (the candidates
    would clump at one edge); a single value gets ±10 %."""
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    margin = (hi - lo) * 0.05 if hi > lo else (abs(hi) * 0.1 or 1.0)
    return max(lo - margin, 0.0), hi + margin


def _axis(scale: tuple, span: float, height: float) -> list:
    lo, hi = scale
    parts = [f'<line x1="{LEFT}" y1="{TOP - 4}" x2="{LEFT + span}" y2="{TOP - 4}" class="ag-axis"/>']
    for frac in (0, 0.5, 1):
        x = LEFT + span * frac
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 7}" x2="{x:.1f}" y2="{height - 4}" class="ag-grid"/>'
                     f'<text x="{x:.1f}" y="{TOP - 10}" class="ag-tick">{_ms(lo + (hi - lo) * frac)}</text>')
    return parts


def _common_parts(signatures) -> list:
    """The ``name=value`` parts every candidate shares (said once, under the plot)."""
    if len(signatures) < 2:
        return []
    split = [sig.split(",") for sig in signatures]
    shared = set(split[0]).intersection(*split[1:])
    return [part for part in split[0] if part in shared]


def _differing(sig: str, common) -> str:
    return ",".join(part for part in sig.split(",") if part not in common) or sig


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _candidate_line(sig, shown_as, points, y, scale, span, colour_of, code_of, is_min_cost) -> list:
    chosen = sum(1 for _, won in points if won)
    label = _short(shown_as, 32)
    mark = " (min-cost)" if is_min_cost else ""
    parts = [f'<g><title>{escape(sig)}{mark}: chosen by {chosen} of {len(points)} timed ranks; '
             f'median {_ms(_typical(points))}</title>',
             f'<text x="4" y="{y + 4:.1f}" class="ag-cand">{escape(code_of(sig))} {escape(label)}</text>']
    failed = sum(1 for ms, _ in points if not math.isfinite(ms))
    for ms, won in _sample(points):
        if not math.isfinite(ms):
            continue
        x = LEFT + span * min(max((ms - scale[0]) / (scale[1] - scale[0]), 0.0), 1.0)
        if won:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour_of(sig)}" class="ag-won"/>')
        else:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="ag-lost"/>')
    side = f"\u2605 won {chosen}" if chosen else ""
    if is_min_cost:
        side += " \u25c6 min-cost"
    if failed:
        side += f" \u00d7{failed} failed"
    parts.append(f'<text x="{LEFT + span + 4:.1f}" y="{y + 4:.1f}" class="ag-side">{side.strip()}</text></g>')
    return parts


def _ms(value: float) -> str:
    if not math.isfinite(value):
        return "failed"
    return f"{value:.3g} ms"
