"""``report show --format python``: each config the files chose (a table's winners, a run's
choices), as ``triton.Config(...)`` lines grouped by kernel, each under a comment naming its keys
and the files that chose it. Pasted as a kernel's ``@triton.autotune(configs=[...])``, one line
leaves one candidate: it runs untimed. The way to pin a kernel for a user who ships no table."""

from __future__ import annotations

import re

from ..core.model import EXTRA_FIELDS, OPTION_FIELDS, Choice, ChoiceKey
from ..core.terminal import on_one_line
from .configs import full_descriptor, Signatures
from .reading import natural, natural_key, read_sources
from .table_show import say_notes

_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?\d+\.\d*(e-?\d+)?|-?\d+e-?\d+|inf|-inf")
_OPTIONS = frozenset({*OPTION_FIELDS, *EXTRA_FIELDS})


def digest_configs(kind: str, document: dict) -> list[tuple]:
    """Per entry of one file: ((arch, kernel, key), signature, descriptor or None, how). A choices
    file names the signature alone; its descriptor is rebuilt from it (``from_signature``)."""
    if kind == "choices":
        found = []
        for entry, value in document["log"].items():
            choice = Choice.parse(value)
            found.append((tuple(ChoiceKey.parse(entry)), choice.signature, None, choice.how))
        return found
    sigs, arch, found = Signatures(), document["arch"], []
    for kernel, keyed in document["kernels"].items():
        for key, entry in keyed.items():
            desc = entry if kind == "table" else entry["config"]
            found.append(((arch, kernel, key), sigs.of(desc), full_descriptor(desc),
                          "table" if kind == "table" else str(entry.get("how", "timed"))))
    return found


class Configs:
    """The fold: per (arch, kernel, key), per signature, its descriptor and the files that chose it."""

    digest = staticmethod(digest_configs)

    def __init__(self):
        self.keys: dict[tuple, dict[str, list]] = {}
        self.sources: list = []

    def absorb(self, source, digested) -> None:
        self.sources.append(source)
        for ident, sig, desc, how in digested:
            slot = self.keys.setdefault(ident, {}).setdefault(sig, [desc, []])
            slot[0] = slot[0] or desc
            slot[1].append(source)


def from_signature(sig: str) -> dict | None:
    """A descriptor rebuilt from a signature (``BLOCK=64,num_warps=4,...``): numbers, booleans and
    None as such, anything else a string; None where a part is not ``name=value`` (a string value
    holding a comma cannot be told apart)."""
    desc: dict = {"kwargs": {}}
    for part in sig.split(",") if sig else ():
        name, equals, text = part.partition("=")
        if not equals or not name:
            return None
        value = int(text) if _INT.fullmatch(text) else float(text) if _FLOAT.fullmatch(text) else \
            {"True": True, "False": False, "None": None}.get(text, text)
        if name in _OPTIONS:
            desc[name] = value
        else:
            desc["kwargs"][name] = value
    return desc


def config_line(desc: dict) -> str:
    """``triton.Config({'BLOCK': 64}, num_warps=4, num_stages=3),``: valid Python whatever the
    file held (every value written by ``repr``)."""
    args = [repr(dict(desc.get("kwargs") or {}))]
    args += [f"{name}={desc[name]!r}" for name in OPTION_FIELDS if desc.get(name) is not None]
    args += [f"{name}={desc[name]!r}" for name, default in EXTRA_FIELDS.items()
             if name in desc and desc[name] != default]
    return f"triton.Config({', '.join(args)}),"


def _labels(sources) -> str:
    labels = sorted({s.label for s in sources}, key=natural)
    return ", ".join(labels[:6]) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")


def print_python(fold: Configs, kept, out) -> int:
    """The lines, kernel by kernel (in the report's order), of the files ``kept`` (the latest run's,
    by default, and the tables); how many keys those files disagree on."""
    print("# autotune_guard: the configs these files chose, as triton.Config lines to pin in source.\n"
          "# Under a kernel's @triton.autotune, configs=[one line] leaves one candidate: it runs untimed.\n"
          "# Where a kernel's keys chose several configs, Triton times among the lines kept.", file=out)
    by_kernel: dict[tuple, dict[str, list]] = {}
    disagree = 0
    for ident in sorted(fold.keys, key=lambda k: natural_key(ChoiceKey(*k))):
        arch, kernel, key = ident
        chosen = {sig: (desc, [s for s in sources if id(s) in kept]) for sig, (desc, sources) in fold.keys[ident].items()}
        chosen = {sig: found for sig, found in chosen.items() if found[1]}
        if not chosen:
            continue
        disagree += len(chosen) > 1
        for sig, (desc, sources) in chosen.items():
            slot = by_kernel.setdefault((arch, kernel), {}).setdefault(sig, [desc, []])
            slot[1].append((key, sources, len(chosen) > 1))
    for (arch, kernel), configs in by_kernel.items():
        print(f"\n# kernel {on_one_line(kernel)}  [arch {on_one_line(arch)}]", file=out)
        for sig, (desc, keys) in configs.items():
            for key, sources, split in keys:
                mark = "  (the files disagree on this key)" if split else ""
                print(f"#   key ({on_one_line(key)}): {on_one_line(_labels(sources))}{mark}", file=out)
            desc = desc or from_signature(sig)
            if desc is None:
                print(f"#   {on_one_line(sig)}: not rebuilt from its signature (a value holds a comma); "
                      "the record or table that chose it holds it whole", file=out)
            else:
                print(config_line(desc), file=out)
    return disagree


def run(args, accept, out) -> int:
    """``show --format python``: every file read by the ``Configs`` fold, then printed."""
    fold = Configs()
    sources = read_sources(args.files, accept, "show", args.all_runs, fold=fold, jobs=args.jobs)
    say_notes(sources)
    disagree = print_python(fold, {id(s) for s in sources}, out)
    args.check_status = 1 if args.check and disagree else 0
    return args.check_status

