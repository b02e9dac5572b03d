"""The public Python API: install a policy, read what was chosen."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace

from . import interception, policy as policies, writer
from . import state as shared
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
        writer.check_writable(policy.record_path, "AUTOTUNE_RECORD_PATH")
    if policy.digest_path:
        writer.check_writable(policy.digest_path, "AUTOTUNE_DIGEST_PATH")
    module = interception.triton_autotuner_module()
    if module is not None:
        interception.apply(policy, module)  # raises before changing anything if it cannot
    else:
        from . import _boot

        interception.set_pending(policy)
        _boot.arm()
    # The new process state (policy, empty choice log) was put in place in one step with the files' set-up.
    configure_logging(policy.log_level)
    from . import distributed

    distributed.on_install(policy)
    _started_with(policy)


def _started_with(policy: AutotunePolicy) -> None:
    """Say what is in force and why, name what cannot take effect, and arm the checks that only
    the kernels that run can settle (the first launch, the exit)."""
    global _recheck_determinism, _installed_in
    _recheck_determinism = policy.mode_from == "default"
    _installed_in = os.getpid()
    _launched.clear()
    level = logging.INFO if policy.mode_from not in ("AUTOTUNE_MODE", "default") else logging.DEBUG
    logger.log(level, "mode %s, from %s", policy.mode, policy.mode_from)
    logger.debug("installed policy: %s", _describe(policy))
    if policy.foreign:
        logger.info("not autotune_guard settings, left to their tools: %s", ", ".join(policy.foreign))
    for warning in policies.ineffective_settings(policy):
        logger.warning("%s", warning)


def on_triton_import(module) -> None:
    """The post-import hook of ``triton.runtime.autotuner``."""
    pending = interception.active_policy()
    if pending is not None:  # install() ran before Triton was imported
        interception.apply(pending, module)
        return
    settings, env_file = policies.settings_from_environment()
    if policies.disabled(settings):  # AUTOTUNE_DISABLE=1 in the env file (the .pth saw only the environment)
        configure_logging("INFO")
        logger.info("AUTOTUNE_DISABLE=1 in AUTOTUNE_ENV_FILE=%s: autotune_guard does nothing in this process", env_file)
        return
    install(policy_from_settings(settings, env_file=env_file))


# --- checks the kernels that run settle --------------------------------------------------------

_recheck_determinism = False
_installed_in: int | None = None
_launched: dict[str, set[str]] = {}  # module.function -> meta-parameter names, of autotuners launched


def first_launch_of(autotuner) -> None:
    """Called by the interception at an autotuner's first launch under a policy (never on the
    steady launch path).  Notes the autotuner for the checks at exit, and the first time looks
    for a determinism request the program made after Triton was imported
    (``torch.use_deterministic_algorithms(True)`` imports Triton itself before it sets the flag)."""
    fn = getattr(autotuner, "base_fn", None) or autotuner.fn
    qualified = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"
    first_choice_of(qualified, {k for c in autotuner.configs for k in c.kwargs})


def first_choice_of(qualified: str, parameters) -> None:
    """An autotuner (eager, or compiled by Inductor) met under this policy: ``parameters`` are its
    meta-parameter names.  See :func:`first_launch_of`."""
    global _recheck_determinism
    _launched.setdefault(qualified, set()).update(parameters)
    if _recheck_determinism:
        _recheck_determinism = False
        policy = interception.active_policy()
        if policy is not None and policy.mode_from == "default" and policies._torch_deterministic():
            pinned = replace(policy, mode="pinned", mode_from="torch.are_deterministic_algorithms_enabled(), "
                                                              "found at the first launch (set after Triton was imported)")
            interception.apply(pinned, interception.triton_autotuner_module())
            logger.info("mode pinned, from %s; no AUTOTUNE_MODE was given", pinned.mode_from)


def warn_ineffective_at_exit() -> None:
    """Name the settings the kernels that ran made ineffective: a module prefix, a config-invariant
    name or an AUTOTUNE_BLOCK_SIZES parameter that matched none of the autotuners launched."""
    policy = interception.active_policy()
    if policy is None or not _launched or _installed_in != os.getpid():
        return
    names = sorted(_launched)
    listing = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    count = f"{len(names)} autotuner{'s' * (len(names) != 1)} launched ({listing})"
    for prefix in policy.modules:
        if not any(n == prefix or n.startswith(prefix + ".") for n in names):
            logger.warning("AUTOTUNE_MODULES: %r matched none of the %s; kernels outside AUTOTUNE_MODULES ran "
                           "unguarded", prefix, count)
    for name in policy.config_invariant:
        if not any(n == name or n.rpartition(".")[2] == name for n in names):
            logger.warning("AUTOTUNE_CONFIG_INVARIANT: %r matched none of the %s", name, count)
    if policy.mode == "pinned" and policy.block_sizes:
        params = set().union(*(_launched[n] for n in names if policy.in_scope(n)))
        for name, _ in policy.block_sizes:
            if name not in params:
                logger.warning("AUTOTUNE_BLOCK_SIZES: %s is a meta-parameter of none of the %s (theirs: %s); "
                               "it was ignored", name, count, ", ".join(sorted(params)) or "none")


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
    # The rank the evidence is filed under once the process has chosen (it outlives the group).
    fixed = shared.now.lasting.rank_world
    if fixed is None:
        from .distributed import rank_and_world

        fixed = rank_and_world()
    record.ag_rank = fixed[0]
    return True


def _describe(policy):
    from .policy import describe

    return describe(policy)


choice_log = shared.choice_log
choice_digest = shared.choice_digest
