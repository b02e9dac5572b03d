"""The start-up settings a check follows (``guard.startup``), read from the environment once.

Every rank of a group must count the same barriers, so the cadence is never what a later
``install()`` says. Start-up (``_boot``/api) sets ``guard.startup`` and ``guard.startup_read``;
when torch.distributed is imported before that, the barrier hook reads them here, once.
"""

from __future__ import annotations

from ... import runtime
from ...core import settings
from ...core.settings import StartupSettings
from .state import adapter_state


def read_startup() -> None:
    """Set ``guard.startup`` from the environment (and ``AUTOTUNE_ENV_FILE``) unless start-up has
    already; a bad value is kept and raised by ``startup()``, naming the variable."""
    guard = runtime.current()
    with adapter_state().lock:
        if getattr(guard, "startup_read", False):
            return
        try:
            found, _ = settings.settings_from_environment()
            guard.startup = settings.startup_settings(found)
        except Exception as exc:  # PolicyError (or an unreadable env file), named by the parser
            adapter_state().startup_error.append(exc)
        guard.startup_read = True


def startup() -> StartupSettings:
    """``guard.startup``, read first if need be; raises the error of a bad start-up value."""
    guard = runtime.current()
    if not getattr(guard, "startup_read", False):
        read_startup()
    if adapter_state().startup_error:
        raise adapter_state().startup_error[0]
    return guard.startup


def strict() -> bool:
    """Whether a disagreement raises: ``AUTOTUNE_VERIFY_STRICT`` at start-up, or in the policy."""
    policy = runtime.current().epoch.installed
    return startup().verify_strict or (policy is not None and policy.verify_strict)

