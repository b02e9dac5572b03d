"""The public Python API: install a policy, read what was chosen."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from . import evidence, interception
from .policy import AutotunePolicy, policy_from_environment, policy_from_settings

logger = logging.getLogger("autotune_guard")


def install(policy: AutotunePolicy | Mapping | None = None, *, deterministic: bool = False) -> AutotunePolicy:
    """Apply ``policy`` to the whole process, replacing the previous one.

    ``None`` reads the ``AUTOTUNE_*`` environment (and ``AUTOTUNE_ENV_FILE``); a mapping takes
    ``AUTOTUNE_*`` names or field names.  An omitted mode is derived: a record path selects
    record, ``deterministic`` (or torch's deterministic flag) pinned, else auto.  Raises when
    the policy cannot be carried out (a bad value, an unwritable record path, an unsupported
    Triton); the previous policy then stays in place.  Without Triton imported yet, the policy
    is applied when it is.
    """
    if policy is None:
        new = policy_from_environment(deterministic=deterministic)
    elif isinstance(policy, AutotunePolicy):
        new = policy
    elif isinstance(policy, Mapping):
        new = policy_from_settings(policy, deterministic=deterministic)
    else:
        raise TypeError(f"install() takes an AutotunePolicy, a mapping or None, not {type(policy).__name__}")
    _carry_out(new)
    return new


def _carry_out(policy: AutotunePolicy) -> None:
    if policy.record_path:
        evidence.check_writable(policy.record_path, "AUTOTUNE_RECORD_PATH")
    if policy.digest_path:
        evidence.check_writable(policy.digest_path, "AUTOTUNE_DIGEST_PATH")
    module = sys.modules.get("triton.runtime.autotuner")
    if module is not None:
        interception.apply(policy, module)  # raises before changing anything if it cannot
    else:
        from . import _boot

        interception.set_pending(policy)
        _boot.arm()
    configure_logging(policy.log_level)
    evidence.reset()
    evidence.configure(policy.digest_path, policy.record_path, policy.mode)
    from . import distributed

    distributed.on_install(policy)
    logger.debug("installed policy: %s", _describe(policy))


def on_triton_import(module) -> None:
    """The post-import hook of ``triton.runtime.autotuner``."""
    pending = interception.active_policy()
    if pending is not None:  # install() ran before Triton was imported
        interception.apply(pending, module)
    else:
        install(None)


def active_policy() -> AutotunePolicy | None:
    """The policy currently installed, if any."""
    return interception.active_policy()


def configure_logging(level: str) -> None:
    """autotune_guard logs to stderr through the ``autotune_guard`` logger, each line tagged
    with the rank; give that logger handlers of your own to send it elsewhere."""
    log = logging.getLogger("autotune_guard")
    log.setLevel(level)
    if not any(getattr(h, "autotune_guard", False) for h in log.handlers):
        handler = logging.StreamHandler()
        handler.autotune_guard = True
        handler.addFilter(_tag_rank)
        handler.setFormatter(logging.Formatter("autotune_guard[rank %(ag_rank)s] %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.propagate = False


def _tag_rank(record) -> bool:
    from .distributed import rank_and_world

    record.ag_rank = rank_and_world()[0]
    return True


def _describe(policy):
    from .policy import describe

    return describe(policy)


choice_log = evidence.choice_log
choice_digest = evidence.choice_digest
