"""What a table knows of each entry beside its config, read defensively: who added it (``added``),
how it was chosen (``measured``: the verdict, its margin, the pooled verdict), its history (the
measurements kept beside it, ``earlier``) and a retune asked for; and each part that cannot be
used, named in one line (file, kernel, key). Tables are kept for years and edited by hand and by
older writers: a malformed part must never stop a report, only be named and left out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..core.selection import TIE_FLOOR
from ..core.tables import ADDED, MEASURED, PROVENANCE, added_by

EARLIER = "earlier"  # a measured entry's older measurements of the same key (core.pooling.EARLIER)
RETUNE = "retune"  # a table's kernel -> key -> who asked that the next consensus run time it again
SUPERSEDED = "superseded"  # a table's list of kernel versions consensus replaced, each whole
VERSIONS = ("arch", "triton", "torch")  # what a measurement was taken on


def kind_of(value) -> str:
    """``an int``, ``a list``...: how a note names what a file holds where something else belongs."""
    if value is None:
        return "null"
    name = {bool: "boolean", int: "int", float: "number", str: "string", list: "list", dict: "object"}.get(
        type(value), type(value).__name__)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def number(value):
    """A finite number as a float, else None (a boolean is no number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _median(entry):
    """A candidate's kept median: a number, inf where it failed (null), None where unusable."""
    median = entry.get("median") if isinstance(entry, dict) else "?"
    if median is None:
        return math.inf
    if isinstance(median, (int, float)) and not isinstance(median, bool) and median > 0 and not math.isnan(median):
        return float(median)
    return None


def _strings(value) -> list | None:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else None


def _scalars(value: dict, problems: list, fields, within: str = "") -> dict:
    """The named fields of a measurement (name -> (checker, what it must be)), each checked."""
    clean = {}
    for name, (check, what) in fields.items():
        found = value.get(name)
        good = check(found) if found is not None else None
        if found is not None and good is None:
            problems.append(f"'{within}{name}' is {kind_of(found)}, not {what}")
        clean[name] = good
    return clean


_STRING = (lambda v: v if isinstance(v, str) else None, "a string")
_COUNT = (lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None, "a whole number")
_NUMBER = (number, "a number")
_LIST = (_strings, "a list")
_POOLED = {"winner": _STRING, "how": _STRING, "runs": _COUNT, "margin": _NUMBER, "spread": _NUMBER, "tied": _LIST}
_MEASURED = {"how": _STRING, "winner": _STRING, "margin": _NUMBER, "rounds": _COUNT, "tied": _LIST,
             **{name: _STRING for name in VERSIONS}}


def clean(value, nested: bool = False) -> tuple[dict | None, list[str]]:
    """One key's measurement with every field checked: (the fields a report reads, or None where
    the part is not an object; what was malformed, as phrases). ``candidates`` becomes signature ->
    median (inf: it failed); ``pooled`` a checked dict or None; ``earlier`` a list of measurements
    of the same shape (an item of ``earlier`` holds no ``earlier`` of its own)."""
    if not isinstance(value, dict):
        return None, [f"is {kind_of(value)}, not an object"]
    problems: list[str] = []
    found = _scalars(value, problems, _MEASURED)
    found["candidates"] = _candidates(value.get("candidates"), problems)
    pooled = value.get("pooled")
    found["pooled"] = None
    if isinstance(pooled, dict):
        found["pooled"] = _scalars(pooled, problems, _POOLED, "pooled.")
    elif pooled is not None:
        problems.append(f"'pooled' is {kind_of(pooled)}, not an object")
    found["replaced"] = value.get("replaced") if isinstance(value.get("replaced"), dict) else None
    found[EARLIER] = [] if nested else _earlier(value.get(EARLIER), problems)
    return found, problems


def _candidates(value, problems: list) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"'candidates' is {kind_of(value)}, not an object")
        return {}
    medians = {sig: _median(entry) for sig, entry in value.items()}
    bad = [sig for sig, median in medians.items() if median is None]
    if bad:
        problems.append(f"{len(bad)} candidate timing{'s' * (len(bad) != 1)} without a usable median")
    return {sig: median for sig, median in medians.items() if median is not None}


def _earlier(value, problems: list) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"'{EARLIER}' is {kind_of(value)}, not a list")
        return []
    kept = []
    for n, item in enumerate(value):
        found, said = clean(item, nested=True)
        problems.extend(f"'{EARLIER}' item {n + 1} {phrase}" if phrase.startswith("is ") else
                        f"'{EARLIER}' item {n + 1}: {phrase}" for phrase in said)
        if found is not None:
            kept.append(found)
    return kept


def _part(document: dict, name: str, kernel: str, key: str | None = None):
    """``document[name][kernel][key]`` (or ``[kernel]``), None where any level is missing or not an object."""
    found = document.get(name)
    found = found.get(kernel) if isinstance(found, dict) else None
    if key is None:
        return found
    return found.get(key) if isinstance(found, dict) else None


def measurement(document: dict, kernel: str, key: str) -> tuple[dict | None, list[str]]:
    """``clean`` of an entry's ``measured`` part; (None, []) where the table kept none."""
    found = _part(document, MEASURED, kernel, key)
    return (None, []) if found is None else clean(found)


# --- the words ------------------------------------------------------------------------------------

def percent(value) -> str:
    return f"{value * 100:+.2f} %" if value is not None else "?"


def verdict_phrase(m: dict | None) -> str | None:
    """How an entry was chosen, as one phrase (``report show``); None without a verdict. A margin
    is the next candidate's slowdown (0.10: 10 % slower), pooled or not."""
    if m is None or m["how"] is None:
        return None
    how, margin = m["how"], percent(m["margin"])
    tie = f"TIE of {len(m['tied'] or [])} within {TIE_FLOOR * 100:g} % (the one declared first)"
    said = {"tie": tie + (f", the next by {margin}" if m["margin"] is not None else ""),
            "clear": f"clear by {margin}", "one finalist": f"one finalist, by {margin}",
            "one pass": f"one pass, by {margin}", "kept": f"kept, the new candidates by {margin}"}.get(how, how)
    text = f"{said}; {len(m['candidates'])} candidates timed" + (f", {m['rounds']} rounds" if m["rounds"] else "")
    pooled = m["pooled"]
    if pooled is not None and pooled["runs"] is not None:
        by = f"clear by {percent(pooled['margin'])}" if pooled["margin"] is not None else "no other candidate"
        if pooled["how"] == "tie":
            by = f"TIE of {len(pooled['tied'] or []) + 1} within {TIE_FLOOR * 100:g} % (the one declared first)" + \
                (f", the next by {percent(pooled['margin'])}" if pooled["margin"] is not None else "")
        spread = f", ±{pooled['spread'] * 100:.2f} % between runs" if pooled["spread"] is not None else ""
        text = f"POOLED over {pooled['runs']} cold runs: {by}{spread}; the last run's own: {text}"
    return text


def same_versions(m: dict, other: dict) -> bool:
    """Whether ``other`` was measured on what ``m`` was (arch, Triton, torch), where ``m`` says."""
    return all(other[name] == m[name] for name in VERSIONS if m[name] is not None)


def history(m: dict | None, config: str) -> dict:
    """The measurements kept beside an entry's own: how many, how many on the same arch and
    versions, how many chose ``config`` (the entry's), what the others chose, and how many were
    entries this one replaced."""
    earlier = m[EARLIER] if m is not None else []
    others: dict[str, int] = {}
    for item in earlier:
        if item["winner"] is not None and item["winner"] != config:
            others[item["winner"]] = others.get(item["winner"], 0) + 1
    return {"earlier": len(earlier), "comparable": sum(same_versions(m, item) for item in earlier) if m else 0,
            "same_winner": sum(item["winner"] == config for item in earlier), "other_winners": others,
            "replaced": sum(item["replaced"] is not None for item in earlier)}


def history_phrase(h: dict) -> str | None:
    """``2 earlier measurements (2 on these versions): 1 chose this config, BLOCK=16,... 1``; None
    without any."""
    n = h["earlier"]
    if not n:
        return None
    text = f"{n} earlier measurement{'s' * (n != 1)} ({h['comparable']} on these versions): " \
           f"{h['same_winner']} chose this config"
    if h["other_winners"]:
        text += "; others chose " + ", ".join(f"{sig} ({count}x)" for sig, count in sorted(h["other_winners"].items()))
    if h["replaced"]:
        text += f"; {h['replaced']} held the entry before it was replaced"
    return text


# --- one entry, one file ----------------------------------------------------------------------------

@dataclass
class Facts:
    """What a table knows of one entry (plain data; ``as_json`` for ``--json``)."""

    kernel: str
    key: str
    config: str
    added: dict | None = None
    added_by: str | None = None
    measured: dict | None = None
    verdict: str | None = None
    history: dict = field(default_factory=dict)
    retune: bool = False
    problems: list = field(default_factory=list)

    def as_json(self) -> dict:
        m, pooled = self.measured, (self.measured or {}).get("pooled")
        return {"kernel": self.kernel, "key": self.key, "config": self.config, "added": self.added,
                "added_by": self.added_by, "verdict": self.verdict,
                "how": m["how"] if m else None, "margin": m["margin"] if m else None,
                "pooled": pooled, "history": self.history, "retune": self.retune, "problems": self.problems}


def entry_facts(document: dict, kernel: str, key: str, config: str) -> Facts:
    """What ``document`` (a table's, whole or its header) knows of its entry (``kernel``, ``key``)
    whose config's signature is ``config``."""
    m, problems = measurement(document, kernel, key)
    who = _part(document, ADDED, kernel, key)
    return Facts(kernel, key, config, {k: v for k, v in who.items() if isinstance(v, (str, int, float))}
                 if isinstance(who, dict) else None, added_by(document, kernel, key), m, verdict_phrase(m),
                 history(m, config), _part(document, RETUNE, kernel, key) is not None, problems)


def verdict_of(document: dict, kernel: str, key: str) -> str | None:
    """``verdict_phrase`` of an entry, never raising whatever its ``measured`` part holds."""
    return verdict_phrase(measurement(document, kernel, key)[0])


def medians_of(document: dict, kernel: str, key: str) -> dict:
    """signature -> the median the entry's last measurement kept (inf: failed); {} where none."""
    m = measurement(document, kernel, key)[0]
    return dict(m["candidates"]) if m is not None else {}


def file_notes(path: str, document: dict) -> list[str]:
    """One line per part of a table that cannot be used (the file, the kernel, the key, what is
    wrong): what a report says on stderr before it shows the table without those parts."""
    notes = []
    for name in (MEASURED, ADDED, PROVENANCE, RETUNE):
        part = document.get(name)
        if part is not None and not isinstance(part, dict):
            notes.append(f"{path}: its '{name}' part is {kind_of(part)}, not an object of kernel -> ...: left out")
            continue
        for kernel, keyed in (part or {}).items():
            if not isinstance(keyed, dict):
                notes.append(f"{path}: kernel {kernel}: its '{name}' part is {kind_of(keyed)}, not an object: left out")
    superseded = document.get(SUPERSEDED)
    if superseded is not None and not isinstance(superseded, list):
        notes.append(f"{path}: its '{SUPERSEDED}' part is {kind_of(superseded)}, not a list: left out")
    measured = document.get(MEASURED)
    for kernel, keyed in (measured.items() if isinstance(measured, dict) else ()):
        for key, value in (keyed.items() if isinstance(keyed, dict) else ()):
            problems = clean(value)[1]
            where = f"{path}: kernel {kernel} key ({key}): its '{MEASURED}' part"
            if problems and problems[0].startswith("is "):
                notes.append(f"{where} {problems[0]}: left out (the entry is shown without it)")
            elif problems:
                notes.append(f"{where} holds what cannot be used ({'; '.join(problems)}): that is left out, the "
                             "rest shown")
    return notes


def superseded_of(document: dict) -> list[dict]:
    """The kernel versions a table keeps as replaced: (kernel, how many entries, why, when) each."""
    found = document.get(SUPERSEDED)
    kept = []
    for item in found if isinstance(found, list) else ():
        if not isinstance(item, dict):
            continue
        entries = item.get("entries", item.get("kernels"))
        kept.append({"kernel": str(item.get("kernel", "?")), "entries": len(entries) if isinstance(entries, dict) else 0,
                     "why": [str(w) for w in item.get("why")] if isinstance(item.get("why"), list) else [],
                     "replaced_at": str(item.get("replaced_at", "?"))})
    return kept
