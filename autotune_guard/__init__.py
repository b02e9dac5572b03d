"""autotune_guard: reproducible, checkable Triton autotuning for unmodified programs.

This package is imported at every interpreter start where an ``AUTOTUNE_*`` variable is set, so
its top level imports nothing; the API below loads on first use.
"""

__version__ = "0.1.0"

_API = {
    "install": "api",
    "uninstall": "api",
    "active_policy": "api",
    "choice_log": "api",
    "choice_digest": "api",
    "ungoverned": "api",
    "verify_choices": "adapters.distributed",
    "maybe_verify_choices": "adapters.distributed",
    "AutotunePolicy": "core.settings",
    "GuardError": "core.errors",
    "PolicyError": "core.errors",
    "SelectionError": "core.errors",
    "ConsensusError": "core.errors",
    "ChoiceMismatchError": "core.errors",
    "FileFormatError": "core.errors",
}
__all__ = list(_API)


def __getattr__(name):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune_guard' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"autotune_guard.{module}"), name)
