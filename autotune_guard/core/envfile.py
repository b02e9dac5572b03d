"""The optional dotenv file (``AUTOTUNE_ENV_FILE``): its ``AUTOTUNE_*`` keys, checked more strictly
than python-dotenv checks them. python-dotenv is imported only when a file is read."""

from __future__ import annotations

import os
import re
from typing import Mapping

from .errors import PolicyError

_REFERENCE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")  # python-dotenv's own syntax


def read_env_file(path: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``AUTOTUNE_*`` keys of a dotenv file (python-dotenv is imported only here).

    A line python-dotenv cannot parse, and an ``AUTOTUNE_*`` value that refers to an unset
    variable (``${RUN_DIR}/rec`` would quietly become ``/rec``), are errors naming the file and
    the line: python-dotenv itself would skip the one and expand the other to nothing.
    """
    environ = os.environ if environ is None else environ
    if not os.path.isfile(path):
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r}: no such file")
    try:
        from dotenv import dotenv_values
        from dotenv.parser import parse_stream
    except Exception as exc:  # python-dotenv missing or broken: as loud as any bad setting
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} needs python-dotenv, which cannot be imported ({exc}); "
                          "reinstall autotune-guard's dependencies") from exc
    try:
        with open(path, encoding="utf-8") as src:
            bindings = list(parse_stream(src))
        values = dotenv_values(path)
    except Exception as exc:  # unreadable file, bad encoding: name the file
        raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r} cannot be read: {exc}") from exc
    defined = set()
    for binding in bindings:
        if binding.error:
            text = binding.original.string.strip()
            raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r}: line {binding.original.line} cannot be parsed "
                              f"({text[:80]!r}); allowed: NAME=VALUE lines, # comments, blank lines")
        if binding.key and binding.key.startswith("AUTOTUNE_") and binding.value:
            for ref in _REFERENCE.finditer(binding.value):
                name = ref.group("name")
                if ref.group("default") is None and not environ.get(name) and name not in defined:
                    raise PolicyError(f"AUTOTUNE_ENV_FILE={path!r}: line {binding.original.line}: {binding.key} "
                                      f"refers to ${{{name}}}, which is not set (it would expand to nothing)")
        if binding.key:
            defined.add(binding.key)
    return {k: v for k, v in values.items() if k.startswith("AUTOTUNE_") and v is not None}
