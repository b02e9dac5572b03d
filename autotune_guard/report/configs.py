"""The configs of one file, each distinct one computed once: a record repeats a kernel's
candidate list in every entry, and recomputing eight signatures per entry costs as much as
checking the whole file.  Configs are told apart by their ``marshal`` bytes (exact, and five
times quicker than ``repr``), never by ``==``, which takes ``true``, ``1`` and ``1.0`` for one
value (and so one signature for three).  Equal configs whose bytes differ (marshal marks objects
shared elsewhere) are only computed twice."""

from __future__ import annotations

from marshal import dumps as exact_bytes

from ..core.model import signature


def full_descriptor(desc: dict) -> dict:
    """A stored config with its ``kwargs`` present (a file may leave an empty one out)."""
    return {**desc, "kwargs": dict(desc.get("kwargs", {}))}


class Signatures:
    """``of(config)``: its signature; ``of_list(configs)``: a tuple of theirs, the same tuple
    object for every equal list (so a fold may compare lists by identity); ``descriptors``:
    signature -> the first full descriptor that gave it, in the order first seen."""

    def __init__(self):
        self.descriptors: dict[str, dict] = {}
        self._one: dict[bytes, str] = {}
        self._lists: dict[bytes, tuple] = {}
        # A checked record's equal candidate lists are one object (``core.schema``): by identity first
        self._by_identity: dict[int, tuple[list, tuple]] = {}

    def of(self, desc: dict) -> str:
        text = exact_bytes(desc)
        sig = self._one.get(text)
        if sig is None:
            full = full_descriptor(desc)
            sig = self._one[text] = signature(full)
            self.descriptors.setdefault(sig, full)
        return sig

    def of_list(self, descs: list) -> tuple:
        known = self._by_identity.get(id(descs))
        if known is not None and known[0] is descs:  # (the list is held: its id is never another's)
            return known[1]
        text = exact_bytes(descs)
        found = self._lists.get(text)
        if found is None:
            found = self._lists[text] = tuple(map(self.of, descs))
        self._by_identity[id(descs)] = (descs, found)
        return found
