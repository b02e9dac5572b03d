"""The parsers of ``AUTOTUNE_*`` values: each takes the variable's name and its raw value (text,
or a typed value given to ``install()``) and returns the parsed value, or raises
:class:`PolicyError` naming the variable, the value, what is allowed and what to do."""

from __future__ import annotations

import difflib
import os
import re
from typing import Mapping

from .errors import PolicyError
from .store_url import hide_password, is_store_url, parse_store_url, split_table_path

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_BLOCK_SIZES = "NAME=VALUE pairs of positive integers, separated by ',' (like BLOCK_M=64,BLOCK_N=128)"


def parse_bool(var: str, value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PolicyError(f"{var}={value!r} is not a boolean; allowed: 1/0, true/false, yes/no, on/off",
                      variable=var, value=value, allowed=_TRUE + _FALSE)


def parse_switch(var: str, value) -> bool:
    """A switch that is 0 or 1 and nothing else (AUTOTUNE_CONSENSUS_SPLIT)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text in ("0", "1"):
        return text == "1"
    raise PolicyError(f"{var}={value!r} is not a switch; allowed: 0 (off) or 1 (on)", variable=var, value=value,
                      allowed=("0", "1"))


def parse_choice(var: str, value, allowed) -> str:
    text = str(value).strip().lower()
    if text not in allowed:
        close = difflib.get_close_matches(text, allowed, n=1, cutoff=0.6)
        meant = f"; did you mean {var}={close[0]}?" if close else ";"
        raise PolicyError(f"{var}={value!r} is not allowed{meant} allowed: {', '.join(allowed)}",
                          variable=var, value=value, allowed=tuple(allowed))
    return text


def parse_mode(var: str, value, modes) -> str:
    """``AUTOTUNE_MODE``; chaos is a switch of pinned mode, not a mode, and the error says so."""
    if str(value).strip().lower() == "chaos":
        raise PolicyError(f"{var}={value!r} is not a mode: chaos is a test of pinned mode; set AUTOTUNE_MODE=pinned "
                          f"AUTOTUNE_CHAOS=1 (each rank then picks a different config); allowed modes: {', '.join(modes)}",
                          variable=var, value=value, allowed=tuple(modes))
    return parse_choice(var, value, modes)


def parse_names(var: str, value) -> tuple[str, ...]:
    """A comma-separated list (or an iterable) of dotted names."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(str(item).strip() for item in items if str(item).strip())
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise PolicyError(f"{var}={value!r}: {name!r} is not a dotted Python name (like pkg.module or pkg.module.kernel)",
                              variable=var, value=value, allowed="dotted Python names, separated by ','")
    return names


def parse_paths(var: str, value) -> tuple[str, ...]:
    items = split_table_path(value) if isinstance(value, str) else list(value)
    paths = tuple(str(item) for item in items if str(item))
    # A mistyped table path would otherwise pin every kernel by AUTOTUNE_ON_MISS, silently.
    for path in paths:
        if is_store_url(path):
            parse_store_url(var, path)  # its syntax now; whether it answers, at install (adapters.redis_tables)
        elif not os.path.exists(path):
            allowed = ("directories holding <arch>.json tables, table files, or a table store's URL "
                       f"(redis://host:port/db), separated by {os.pathsep!r}")
            shown = hide_password(str(value))
            raise PolicyError(f"{var}={shown!r}: {path!r} does not exist (a table folder to start: mkdir -p {path}; "
                              f"AUTOTUNE_MODE=consensus makes it); allowed: {allowed}",
                              variable=var, value=shown, allowed=allowed)
    return paths


def made_table_dir(var: str, value) -> str | None:
    """Under consensus, the first entry of the table path is the folder the table grows in: one not
    there yet is made, as ``mkdir -p`` (its first run then writes the table); None: nothing made."""
    items = split_table_path(value) if isinstance(value, str) else list(value)
    first = str(items[0]) if items else ""
    if not first or is_store_url(first) or os.path.lexists(first) or first.endswith(".json"):
        return None
    try:
        os.makedirs(first, exist_ok=True)  # ranks of one node may race to make it
    except OSError as exc:
        shown = hide_password(str(value))
        raise PolicyError(f"{var}={shown!r}: the table folder {first!r} does not exist and cannot be made "
                          f"({exc.strerror}); make it (mkdir -p {first}) or name one this process can write",
                          variable=var, value=shown, allowed="a table folder this process can make or write") from None
    return os.path.abspath(first)


def parse_block_sizes(var: str, value) -> tuple[tuple[str, int], ...]:
    """``NAME=VALUE,NAME=VALUE`` (or a mapping) of integer meta-parameters."""
    if isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, str):
        pairs = []
        for item in value.split(","):
            if not item.strip():
                continue
            name, sep, number = item.partition("=")
            if not sep:
                raise PolicyError(f"{var}={value!r}: {item.strip()!r} is not NAME=VALUE; expected e.g. BLOCK_M=64,BLOCK_N=128",
                                  variable=var, value=value, allowed=_BLOCK_SIZES)
            pairs.append((name.strip(), number.strip()))
    else:
        pairs = [(str(k), v) for k, v in value]
    result = {}
    for name, number in pairs:
        if not name.isidentifier():
            raise PolicyError(f"{var}={value!r}: {name!r} is not a meta-parameter name",
                              variable=var, value=value, allowed=_BLOCK_SIZES)
        try:
            parsed = int(number)
        except (TypeError, ValueError):
            parsed = None
        if parsed is None or isinstance(number, bool) or parsed <= 0:
            raise PolicyError(f"{var}={value!r}: {name}={number!r} is not a positive integer",
                              variable=var, value=value, allowed=_BLOCK_SIZES)
        result[name] = parsed
    return tuple(sorted(result.items()))


def parse_int_at_least(var: str, value, low: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < low:
        raise PolicyError(f"{var}={value!r} is not allowed; allowed: an integer >= {low}",
                          variable=var, value=value, allowed=f"an integer >= {low}")
    return number


def parse_int_between(var: str, value, low: int, high: int) -> int:
    """An integer from ``low`` to ``high`` (AUTOTUNE_RETIME_ROUNDS)."""
    number = parse_int_at_least(var, value, low)
    if number > high:
        raise PolicyError(f"{var}={value!r} is not allowed; allowed: an integer from {low} to {high}",
                          variable=var, value=value, allowed=f"an integer from {low} to {high}")
    return number


def parse_percent(var: str, value, low: float, high: float) -> float:
    """A percentage from ``low`` to ``high``, written ``3`` or ``3%``, as a fraction (AUTOTUNE_RETIME_BAND)."""
    if isinstance(value, float) and not isinstance(value, bool) and 0 < value < 1:
        value = f"{value * 100:g}"  # install() may give the fraction itself
    text = str(value).strip().removesuffix("%").strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        allowed = f"a percentage from {low:g} to {high:g} (like 3 or 3%)"
        raise PolicyError(f"{var}={value!r} is not allowed; allowed: {allowed}", variable=var, value=value, allowed=allowed)
    return number / 100


def parse_seconds(var: str, value, at_least: float = 0.0) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = None
    if number is None or not number > 0 or number < at_least or number == float("inf"):
        least = f" of at least {at_least:g}" if at_least else ""
        allowed = f"a positive number of seconds{least}"
        raise PolicyError(f"{var}={value!r} is not allowed; allowed: {allowed}", variable=var, value=value, allowed=allowed)
    return number


def parse_seconds_or_none(var: str, value) -> float | None:
    """A positive number of seconds, or ``none`` for no limit."""
    if str(value).strip().lower() == "none":
        return None
    try:
        return parse_seconds(var, value)
    except PolicyError:
        allowed = "a positive number of seconds, or none (no limit)"
        raise PolicyError(f"{var}={value!r} is not allowed; allowed: {allowed}", variable=var, value=value,
                          allowed=allowed) from None


def parse_token(var: str, value) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"[A-Za-z0-9._:@+-]{1,200}", text):
        allowed = "up to 200 letters, digits and . _ : @ + -"
        raise PolicyError(f"{var}={value!r} is not allowed; allowed: {allowed}", variable=var, value=value, allowed=allowed)
    return text


def parse_file_path(var: str, value) -> str | None:
    text = str(value).strip()
    return text or None
