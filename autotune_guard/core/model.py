"""The choice model: what a choice is about (``ChoiceKey``), what was chosen (``Choice``), config
descriptors and their signatures, and Triton's tuning-key formula, written once.

A *descriptor* is a dict ``{"kwargs": {...}, "num_warps": 4, "num_stages": 3, "num_ctas": 1,
"maxnreg": None}``: what a table stores, and what ``descriptor`` makes of a live ``triton.Config``
by reading its attributes (Triton is never imported here). A field of ``EXTRA_FIELDS`` is present
only when the config sets it away from its default, so signatures stay the same across releases.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Mapping, NamedTuple, Sequence

from .numerics import numerics_text

# Launch options of a Config besides its meta-parameters, in signature order.
OPTION_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# Further fields Triton's Config compares, with the default at which a descriptor leaves them out:
# the warp-specialisation fields of 3.2/3.3 and ``ir_override`` of 3.4+.
EXTRA_FIELDS = {
    "num_buffers_warp_spec": 0,
    "num_consumer_groups": 0,
    "reg_dec_producer": 0,
    "reg_inc_consumer": 0,
    "ir_override": None,
}
# How a choice was made, as logs, files and reports spell it: one word for one thing, said here only.
TABLE, TIMED, CONSENSUS = "table", "timed", "consensus"
HOW = (TABLE, TIMED, CONSENSUS, "library", "cache hit", "pruned to one", "reused", "AUTOTUNE_BLOCK_SIZES",
       "chaos (on purpose)")
FALLBACK = "fallback"  # a key the tables lacked, run by an on-miss rule: "fallback (min_cost)"
OLD_PINNED = "pinned"  # files before this vocabulary said it of every pinned choice, table or fallback: still read
AT_EXIT = "error_at_exit"  # the pick of AUTOTUNE_ON_MISS=error_at_exit: min_cost now, a refusal at exit
# The pinned rule's ``Pick.why`` (core.pinned) as a how; the on-miss rules become fallbacks.
_PICK_HOW = {"table": TABLE, "block_sizes": "AUTOTUNE_BLOCK_SIZES", "chaos": "chaos (on purpose)",
             AT_EXIT: f"{FALLBACK} (min_cost; refused at exit)"}


def how_of_pick(why: str) -> str:
    """The how a pinned choice is noted with: ``table``, ``fallback (min_cost)``, ..."""
    return _PICK_HOW.get(why) or f"{FALLBACK} ({why})"


def is_fallback(how: str) -> bool:
    """Whether a choice's how says the tables lacked its key (an on-miss rule ran)."""
    return how.startswith(FALLBACK + " (")


class ChoiceKey(NamedTuple):
    """What one choice is about: the arch, the kernel (``module.function``) and the tuning key text."""

    arch: str
    kernel: str
    key: str

    def text(self) -> str:
        return f"{self.arch}|{self.kernel}|{self.key}"

    def what(self) -> str:
        """How messages name it."""
        return f"kernel {self.kernel} key ({self.key}) arch {self.arch}"

    @classmethod
    def parse(cls, text: str) -> "ChoiceKey":
        """The inverse of ``text``: arch and kernel names hold no ``|``, a key text may."""
        arch, _, rest = text.partition("|")
        kernel, _, key = rest.partition("|")
        return cls(arch, kernel, key)


class Choice(NamedTuple):
    """What was chosen for a ``ChoiceKey`` (the config's signature) and how (one of ``HOW``)."""

    signature: str
    how: str

    def text(self) -> str:
        return f"{self.signature};{self.how}"

    @classmethod
    def parse(cls, text: str) -> "Choice":
        """The inverse of ``text``: a signature may hold ``;`` (a string meta-parameter), ``how`` never."""
        signature, _, how = text.rpartition(";")
        return cls(signature, how)


def record_entry(config: Mapping, signature: str, how: str, timings: Mapping | None, candidates: list,
                 provenance: Mapping | None = None, measured: Mapping | None = None) -> dict:
    """A record file's entry for one winner: its descriptor (compact), how it was chosen, the
    candidates' timings by signature (None when not timed in this process), every candidate, what
    the kernel was when it was chosen (``provenance``) and what the selection measured (``measured``:
    the finalists' rounds, margin, tie)."""
    entry = {"config": compact(config), "signature": signature, "how": how, "timings": timings,
             "candidates": [compact(c) for c in candidates]}
    if provenance is not None:
        entry["provenance"] = dict(provenance)
    if measured is not None:
        entry["measured"] = dict(measured)
    return entry


# What a choice was made against, as records and tables keep it per kernel; the first three are
# hashes, and a table entry made against other ones is named (and refused with on_miss=error).
PROVENANCE_HASHED = ("source", "candidates", "options")
PROVENANCE_FIELDS = PROVENANCE_HASHED + ("triton", "device")


def _short_hash(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def provenance(source: str, candidates: Sequence[Mapping], options: Mapping, triton: str | None,
               device: str | None, numerics: Mapping | None = None) -> dict:
    """A kernel's provenance: hashes of its source text, its candidate list (signatures, in
    declaration order) and its tuning options (key names, hooks, pruning), the Triton version and
    the device it was chosen on, and the numerics settings beside the config (``core.numerics``)."""
    return {"source": _short_hash(source), "candidates": _short_hash([signature(c) for c in candidates]),
            "count": len(candidates), "options": _short_hash(options), "triton": triton, "device": device,
            **(numerics or {})}


def provenance_differences(recorded: Mapping, live: Mapping) -> list[str]:
    """What differs between a recorded provenance and the live kernel's, as phrases (the hashed
    fields only: a Triton version or device of its own is said by the tables' stale warnings)."""
    differs = []
    for name in PROVENANCE_HASHED:
        if recorded.get(name) and live.get(name) and recorded[name] != live[name]:
            what = {"source": "its source", "candidates": "its candidate list", "options": "its tuning options"}[name]
            extra = ""
            if name == "candidates" and isinstance(recorded.get("count"), int) and recorded["count"] != live.get("count"):
                extra = f" ({recorded['count']} candidates then, {live.get('count')} now)"
            differs.append(f"{what} changed{extra}")
    return differs


class TunedWinner(dict):
    """A winner's descriptor handed to a consensus table writer, with its kernel's provenance
    (``provenance``; None where the kernel has none, as a compiled kernel's), what was measured to
    choose it (``measured``: ``deciding.retime``'s summary; None when nothing was) and whether it
    replaces the table's entry (``extends``: its selection covered the entry's candidates and more)."""

    provenance = None
    measured = None
    extends = False
    replaces = None  # why it replaces the table's entry whatever it holds: "stale" (the kernel changed), "retune"
    choices = None  # signature -> descriptor of every candidate, where the table may pool it again


def tuned_winner(desc: Mapping, provenance: Mapping | None = None, measured: Mapping | None = None,
                 extends: bool = False, replaces: str | None = None, choices: Mapping | None = None) -> TunedWinner:
    winner = TunedWinner(desc)
    winner.provenance = dict(provenance) if provenance is not None else None
    winner.measured = dict(measured) if measured is not None else None
    winner.extends = extends
    winner.replaces = replaces
    winner.choices = dict(choices) if choices is not None else None
    return winner


def provenance_text(recorded: Mapping) -> str:
    """One line for ``report show``."""
    parts = [f"{name} {recorded[name]}" for name in PROVENANCE_FIELDS if recorded.get(name)]
    if isinstance(recorded.get("count"), int):
        parts.insert(2, f"{recorded['count']} candidates")
    return ", ".join(parts + [numerics_text(recorded)])


def log_text(entries: Mapping[ChoiceKey, Choice]) -> dict[str, str]:
    """A choice log as the public API and the choices files spell it."""
    return {key.text(): choice.text() for key, choice in entries.items()}


def digest_of(log: Mapping[str, str]) -> str:
    """A hash of the configs a log names (``arch|kernel|key -> signature``): equal configs, equal
    digests. How each was chosen (``;timed``, ``;table``, ...) is left out, so that a timed run and
    a run pinned from its table, or a trainer and an inference engine, show one digest for one set
    of configs; ``hows`` says how, beside it."""
    text = "\n".join(f"{k} -> {_config_of(v)}" for k, v in sorted(log.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _config_of(choice_text: str) -> str:
    # A log value is ``signature;how``; one without ``;`` (no how) is a signature alone.
    return Choice.parse(choice_text).signature if ";" in choice_text else choice_text


def hows(log: Mapping[str, str]) -> str:
    """How a log's choices were made, counted: ``2 timed, 1 table`` (said beside the digest)."""
    counts: dict[str, int] = {}
    for value in log.values():
        how = Choice.parse(value).how if ";" in value else "?"
        counts[how] = counts.get(how, 0) + 1
    return ", ".join(f"{n} {how}" for how, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def signature(desc: Mapping) -> str:
    """A canonical, version-independent text for a config: ``BLOCK=64,num_warps=4,...``."""
    parts = [f"{name}={value}" for name, value in sorted(desc["kwargs"].items())]
    parts += [f"{name}={desc[name]}" for name in OPTION_FIELDS if desc.get(name) is not None]
    parts += [f"{name}={desc[name]}" for name, default in EXTRA_FIELDS.items() if desc.get(name, default) != default]
    return ",".join(parts)


def static_cost(desc: Mapping) -> tuple:
    """Cost without timing: smallest tile first (product of integer meta-parameters), then fewer
    warps, stages and CTAs; the signature breaks ties, so declaration order never matters."""
    tile = math.prod(v for v in desc["kwargs"].values() if isinstance(v, int) and not isinstance(v, bool))
    return (tile, desc.get("num_warps") or 0, desc.get("num_stages") or 0, desc.get("num_ctas") or 0, signature(desc))


def descriptor(config) -> dict:
    """A live ``triton.Config`` (or anything with its attributes) as plain data."""
    desc = {
        "kwargs": dict(config.kwargs),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": getattr(config, "num_ctas", 1),
        "maxnreg": getattr(config, "maxnreg", None),
    }
    for name, default in EXTRA_FIELDS.items():
        value = getattr(config, name, default)
        if value != default:
            desc[name] = value
    return desc


def compact(desc: Mapping) -> dict:
    """A descriptor as files store it (unset maxnreg left out)."""
    return {k: v for k, v in desc.items() if v is not None}


def key_text(key: Sequence) -> str:
    """A tuning key as tables and logs spell it: ``1024,torch.float16``. A text part holding a
    comma or starting with a quote is JSON-quoted, so that two keys never spell alike."""
    return ",".join(_key_part(part) for part in key)


def _key_part(part) -> str:
    text = str(part)
    if isinstance(part, str) and ("," in text or text.startswith('"') or _reads_as_other(text)):
        return json.dumps(text)
    return text


def _reads_as_other(text: str) -> bool:
    # A string that spells like a number, a bool or None would share its text with that value.
    if text in ("True", "False", "None"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


_MISSING = object()


class TuningKey:
    """Triton's tuning key (the 3.2+ formula): the key arguments' values by name, then the dtype of
    every argument that has one, in declaration order. Built once per autotuner; ``of`` is the
    per-launch path, so the common all-positional call maps no names."""

    __slots__ = ("arg_names", "arg_set", "keys", "key_index")

    def __init__(self, arg_names: Sequence[str], keys: Sequence[str]):
        self.arg_names = list(arg_names)
        self.arg_set = frozenset(self.arg_names)
        self.keys = list(keys)
        self.key_index = tuple(self.arg_names.index(name) for name in self.keys if name in self.arg_set)

    def of(self, args: Sequence, kwargs: Mapping) -> tuple:
        if len(args) <= len(self.arg_names) and self.arg_set.isdisjoint(kwargs):
            count = len(args)
            key = [args[i] for i in self.key_index if i < count]
            for value in args:
                dtype = getattr(value, "dtype", _MISSING)
                if dtype is not _MISSING:
                    key.append(str(dtype))
            return tuple(key)
        values = dict(zip(self.arg_names, args))
        for name, value in kwargs.items():
            if name in self.arg_set:
                values[name] = value
        return self.of_values(values)

    def of_values(self, values: Mapping) -> tuple:
        """The key from argument values by name, in Triton's order: dtypes follow ``values``."""
        key = [values[name] for name in self.keys if name in values]
        key += [str(value.dtype) for name, value in values.items() if name in self.arg_set and hasattr(value, "dtype")]
        return tuple(key)


def qualified_name(fn) -> str:
    """``module.function`` of a kernel function, as tables and logs name it."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"


# Between a kernel's name and the hash that tells it from another kernel of the same name.
SHARED_NAME_MARK = "@"


def kernel_identity(source: str, candidates: Sequence[str]) -> str:
    """A short hash of a kernel's source and its candidate list (what makes two kernels differ)."""
    text = json.dumps([source, list(candidates)])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def shared_name(base: str, identity: str) -> str:
    """The name of a kernel whose ``module.function`` another, different kernel already holds."""
    return f"{base}{SHARED_NAME_MARK}{identity}"


def base_name(name: str) -> str:
    """``module.function`` of a kernel name, without the hash of a shared name."""
    return name.partition(SHARED_NAME_MARK)[0]
