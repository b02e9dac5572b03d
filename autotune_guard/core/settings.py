"""What autotune_guard is asked to do: the immutable policy ``install()`` replaces, and the
start-up settings read once, both built from ``AUTOTUNE_*`` settings and the optional env file.

Every bad value raises :class:`PolicyError` naming the variable, the value and what is allowed:
a guard that silently ignores a typo leaves the program unguarded.

Over 350 lines: the one table of every setting with its parser and the cross-checks between settings.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, fields, replace
from typing import Mapping, NamedTuple

from .envfile import owner_note, read_env_file
from .store_url import hide_password, store_urls
from .errors import PolicyError
from . import late_settings, warning_names
from .pooling import MOST_RUNS
from .settings_values import (made_table_dir, parse_block_sizes, parse_bool, parse_switch, parse_choice, parse_file_path, parse_int_at_least,
                              parse_int_between, parse_mode, parse_names, parse_paths, parse_percent, parse_seconds,
                              parse_seconds_or_none, parse_token)

MODES = ("auto", "pinned", "record", "consensus")
# error: refuse the first key the tables lack; error_at_exit: run min_cost for each such key, and at
# exit name them all and fail the process (every key a job lacks, learned in one run)
ON_MISS = ("min_cost", "first", "error", "error_at_exit")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
STORE_DOWN = ("error", "local")  # a table store that does not answer at start: refuse, or go on without it
DEFAULT_CONSENSUS_TIMEOUT_S = None  # a waiter waits as long as the claimer lives
DEFAULT_CONSENSUS_DEAD_AFTER_S = 120.0  # heartbeat silence that means a claimer on another machine died
DERIVED = "default"  # ``mode_from`` of a mode no setting chose: settled at the first launch
DEFAULT_RETIME_ROUNDS = 10  # the most rounds the finalists are timed again in (docs/winners.md)
DEFAULT_RETIME_BAND = 0.03  # finalists: within 3 % of the first pass's best
DEFAULT_POOL_RUNS = 1  # cold runs a table entry's winner is pooled over (docs/winners.md); 1: the first run's


@dataclass(frozen=True)
class AutotunePolicy:
    """Everything autotune_guard does in this process; see the README for each setting."""

    mode: str = "auto"
    modules: tuple[str, ...] = ()  # module prefixes in scope; empty = every autotuner
    config_invariant: tuple[str, ...] = ()  # module.function names left to Triton's timing
    table_path: tuple[str, ...] = ()
    on_miss: str = "min_cost"
    block_sizes: tuple[tuple[str, int], ...] = ()
    deterministic: bool = False
    enumerate: bool = False
    chaos: bool = False
    digest_path: str | None = None
    record_path: str | None = None
    verify_strict: bool = False
    run_id: str | None = None  # what the evidence files of one run share; derived when None (see writer.run_id)
    consensus_timeout: float | None = DEFAULT_CONSENSUS_TIMEOUT_S
    consensus_dead_after: float = DEFAULT_CONSENSUS_DEAD_AFTER_S
    consensus_split: bool = False  # AUTOTUNE_CONSENSUS_SPLIT: off until measured on GPUs of one node
    log_level: str = "INFO"
    table_store_down: str = "error"  # AUTOTUNE_TABLE_STORE_DOWN: see docs/shared-store.md
    retime_rounds: int = DEFAULT_RETIME_ROUNDS  # AUTOTUNE_RETIME_ROUNDS: 0 times every candidate once
    retime_band: float = DEFAULT_RETIME_BAND  # AUTOTUNE_RETIME_BAND: which candidates are finalists
    pool_runs: int = DEFAULT_POOL_RUNS  # AUTOTUNE_POOL_RUNS: a table's key is timed again until this many runs
    disable_warnings: tuple[str, ...] = ()  # AUTOTUNE_DISABLE_WARNINGS: names of warnings logged at DEBUG instead
    env_file: str | None = field(default=None, compare=False)
    env_file_note: str | None = field(default=None, compare=False)  # names its owner when another user wrote it
    table_dir_made: str | None = field(default=None, compare=False)  # the table folder consensus made at start
    # Why the mode is what it is (logged at install); "default" means no setting chose it, so a
    # determinism request the program makes later is looked for again at the first launch.
    mode_from: str = field(default="AUTOTUNE_MODE", compare=False)
    # AUTOTUNE_* names of other tools: not ours, not close to ours (named once in the log).
    foreign: tuple[str, ...] = field(default=(), compare=False)
    # Start-up settings this policy was given, (variable, parsed value): applied only at start-up.
    startup_given: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    # Whether AUTOTUNE_ON_MISS was given: a fallback it asks for is said at INFO, not WARNING.
    on_miss_given: bool = field(default=False, compare=False)

    def __post_init__(self):
        problems = []
        if self.chaos and self.mode != "pinned":
            problems.append(f"AUTOTUNE_CHAOS=1 needs AUTOTUNE_MODE=pinned (mode is {self.mode})")
        if self.record_path and self.mode not in ("record", "consensus"):
            problems.append(
                f"AUTOTUNE_RECORD_PATH={self.record_path!r} is used by record and consensus modes only (mode is {self.mode})"
            )
        if self.record_path and self.record_path.endswith(("/", os.sep)):
            problems.append(f"AUTOTUNE_RECORD_PATH={self.record_path!r} ends in a separator; it is a file prefix, like runs/rec")
        if self.digest_path and self.digest_path.endswith(("/", os.sep)):
            problems.append(f"AUTOTUNE_DIGEST_PATH={self.digest_path!r} ends in a separator; it is a file prefix, like runs/choices")
        if self.digest_path and self.record_path and \
                os.path.abspath(self.digest_path) == os.path.abspath(self.record_path):
            problems.append(f"AUTOTUNE_DIGEST_PATH={self.digest_path!r} and AUTOTUNE_RECORD_PATH={self.record_path!r} are one prefix: each process "
                            "would write its choices file over its record file; give them different prefixes")
        if problems:
            raise PolicyError("; ".join(problems))

    def in_scope(self, qualified: str) -> bool:
        """Whether the autotuner of ``module.function`` is guarded at all."""
        if qualified in self.config_invariant or qualified.rpartition(".")[2] in self.config_invariant:
            return False
        if not self.modules:
            return True
        return any(qualified == p or qualified.startswith(p + ".") for p in self.modules)


# AUTOTUNE_* variable -> (policy field, parser).  The single place where names are defined.
_VARIABLES = {
    "AUTOTUNE_MODE": ("mode", lambda var, v: parse_mode(var, v, MODES)),
    "AUTOTUNE_MODULES": ("modules", parse_names),
    "AUTOTUNE_CONFIG_INVARIANT": ("config_invariant", parse_names),
    "AUTOTUNE_TABLE_PATH": ("table_path", parse_paths),
    "AUTOTUNE_ON_MISS": ("on_miss", lambda var, v: parse_choice(var, v, ON_MISS)),
    "AUTOTUNE_BLOCK_SIZES": ("block_sizes", parse_block_sizes),
    "AUTOTUNE_DETERMINISTIC": ("deterministic", parse_bool),
    "AUTOTUNE_ENUMERATE": ("enumerate", parse_bool),
    "AUTOTUNE_CHAOS": ("chaos", parse_bool),
    "AUTOTUNE_DIGEST_PATH": ("digest_path", parse_file_path),
    "AUTOTUNE_RECORD_PATH": ("record_path", parse_file_path),
    "AUTOTUNE_VERIFY_STRICT": ("verify_strict", parse_bool),
    "AUTOTUNE_CONSENSUS_TIMEOUT": ("consensus_timeout", parse_seconds_or_none),
    "AUTOTUNE_CONSENSUS_DEAD_AFTER": ("consensus_dead_after", lambda var, v: parse_seconds(var, v, at_least=5.0)),
    "AUTOTUNE_CONSENSUS_SPLIT": ("consensus_split", parse_switch),
    "AUTOTUNE_RUN_ID": ("run_id", lambda var, v: parse_token(var, v)),
    "AUTOTUNE_TABLE_STORE_DOWN": ("table_store_down", lambda var, v: parse_choice(var, v, STORE_DOWN)),
    "AUTOTUNE_RETIME_ROUNDS": ("retime_rounds", lambda var, v: parse_int_between(var, v, 0, 100)),
    "AUTOTUNE_RETIME_BAND": ("retime_band", lambda var, v: parse_percent(var, v, 0.1, 50)),
    "AUTOTUNE_POOL_RUNS": ("pool_runs", lambda var, v: parse_int_between(var, v, 1, MOST_RUNS)),
    "AUTOTUNE_DISABLE_WARNINGS": ("disable_warnings", warning_names.parse),
    "AUTOTUNE_LOG_LEVEL": ("log_level", lambda var, v: parse_choice(var, v, [l.lower() for l in LOG_LEVELS]).upper()),
}
# Read once at start-up (StartupSettings), not policy fields: every rank must count the same barriers.
_STARTUP_VARIABLES = {"AUTOTUNE_VERIFY_EVERY": ("verify_every", lambda var, v: parse_int_at_least(var, v, 0))}
# Read by the bootstrap, this module or the uncaught-error hook (AUTOTUNE_TRACEBACK), not policy fields.
_CONTROL_VARIABLES = ("AUTOTUNE_DISABLE", "AUTOTUNE_ENV_FILE", "AUTOTUNE_TRACEBACK")
_FIELD_TO_VAR = {name: var for var, (name, _) in {**_VARIABLES, **_STARTUP_VARIABLES}.items()}
KNOWN_VARIABLES = tuple(_VARIABLES) + tuple(_STARTUP_VARIABLES) + _CONTROL_VARIABLES
EVERY_SETTING = "docs/settings.md, section Every setting"  # where a did-you-mean sends for the rest


def close_to_ours(name: str) -> str | None:
    """The setting an unknown ``AUTOTUNE_*`` name was probably meant to be, or None.

    The rule: a name is ours, mistyped, when it is close to one of ours (difflib ratio of the
    part after ``AUTOTUNE_`` at least 0.7: ``AUTOTUNE_MDOE``, ``AUTOTUNE_BLOCKSIZES``) or starts
    with the same word (``AUTOTUNE_TABLE_DIR``, ``AUTOTUNE_VERIFY``: the closest such); that is an error.  Any other
    ``AUTOTUNE_*`` name (``AUTOTUNE_CACHE_DIR``) belongs to another tool: a one-line notice.
    """
    suffix = name[len("AUTOTUNE_"):].upper()
    ours = {known[len("AUTOTUNE_"):]: known for known in KNOWN_VARIABLES}
    close = difflib.get_close_matches(suffix, ours, n=1, cutoff=0.7)
    if close:
        return ours[close[0]]
    first = suffix.split("_", 1)[0]
    same_word = [known for known in ours if first and known.split("_", 1)[0] == first]
    if same_word:
        return ours[max(same_word, key=lambda known: difflib.SequenceMatcher(None, suffix, known).ratio())]
    return None


def settings_from_environment(environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], str | None]:
    """The effective ``AUTOTUNE_*`` settings: the environment over the optional dotenv file.

    A ``.env`` in the working directory is *not* read on its own: name it with
    ``AUTOTUNE_ENV_FILE=.env``, so that what a process does never depends on where it starts.
    """
    if environ is None:
        environ = os.environ
        late_settings.remember(environ)  # a later change is named at exit: it does nothing
    env_file = (environ.get("AUTOTUNE_ENV_FILE") or "").strip() or None
    settings = read_env_file(env_file, environ) if env_file else {}
    settings.update({k: v for k, v in environ.items() if k.startswith("AUTOTUNE_")})
    return settings, env_file


def disabled(settings: Mapping[str, str]) -> bool:
    """``AUTOTUNE_DISABLE`` as the settings give it (the environment or the env file)."""
    raw = settings.get("AUTOTUNE_DISABLE")
    return bool(raw and str(raw).strip() and parse_bool("AUTOTUNE_DISABLE", raw))


def policy_from_settings(settings: Mapping, *, deterministic: bool = False, env_file: str | None = None) -> AutotunePolicy:
    """Build a policy from ``AUTOTUNE_*`` names or policy field names (values: text or typed).

    An omitted mode is derived: a record path selects record; a determinism request
    (``deterministic``, ``AUTOTUNE_DETERMINISTIC`` or torch's deterministic flag) selects pinned.
    """
    values = {}
    foreign = []
    startup = []
    for name, raw in settings.items():
        var = name if name.startswith("AUTOTUNE_") else _FIELD_TO_VAR.get(name)
        if var in _CONTROL_VARIABLES:
            if var != "AUTOTUNE_ENV_FILE" and raw is not None and str(raw).strip():
                parse_bool(var, raw)  # a typo here must not pass silently either
            continue
        if var in _STARTUP_VARIABLES:
            if raw is not None and str(raw).strip():
                startup.append((var, _STARTUP_VARIABLES[var][1](var, raw)))
            continue
        if var not in _VARIABLES:
            if not name.startswith("AUTOTUNE_"):
                raise PolicyError(f"{name}={raw!r} is not a setting autotune_guard knows; known: {', '.join(_FIELD_TO_VAR)}",
                                  variable=name, value=raw, allowed=tuple(_FIELD_TO_VAR))
            meant = close_to_ours(name)
            if meant:
                raise PolicyError(f"{name}={raw!r} is not a setting autotune_guard knows; did you mean {meant}? "
                                  f"(every setting: {EVERY_SETTING})", variable=name, value=raw,
                                  allowed=tuple(KNOWN_VARIABLES))  # the list is in the docs: the hint is the line
            foreign.append(name)  # another tool's variable
            continue
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            continue  # an empty variable counts as unset
        field_name, parse = _VARIABLES[var]
        if var == "AUTOTUNE_TABLE_PATH" and str(settings.get("AUTOTUNE_MODE", settings.get("mode"))).strip() == "consensus":
            values["table_dir_made"] = made_table_dir(var, raw)  # consensus writes its table there
        values[field_name] = parse(var, raw)
    if "mode" in values:
        values["mode_from"] = "AUTOTUNE_MODE"
    elif values.get("record_path"):
        values["mode"], values["mode_from"] = "record", "AUTOTUNE_RECORD_PATH"
    elif deterministic or values.get("deterministic"):
        values["mode"], values["mode_from"] = "pinned", "a determinism request (AUTOTUNE_DETERMINISTIC or install(deterministic=True))"
    elif values.get("table_path"):
        values["mode"], values["mode_from"] = "pinned", "AUTOTUNE_TABLE_PATH (tables are used by pinned mode)"
    else:
        values["mode_from"] = DERIVED  # pinned if torch's deterministic flag is on at the first launch
    return AutotunePolicy(**values, env_file=env_file, foreign=tuple(sorted(foreign)), startup_given=tuple(startup),
                          on_miss_given="on_miss" in values, env_file_note=owner_note(env_file) if env_file else None)


def policy_from_environment(environ: Mapping[str, str] | None = None, *, deterministic: bool = False) -> AutotunePolicy:
    settings, env_file = settings_from_environment(environ)
    return policy_from_settings(settings, deterministic=deterministic, env_file=env_file)


class StartupSettings(NamedTuple):
    """Settings read once, when the process starts being guarded, and never changed by ``install()``."""

    verify_every: int = 0
    verify_strict: bool = False


def startup_settings(settings: Mapping[str, str]) -> StartupSettings:
    """The start-up settings of the effective ``AUTOTUNE_*`` settings; PolicyError names a bad value."""
    every, strict = settings.get("AUTOTUNE_VERIFY_EVERY"), settings.get("AUTOTUNE_VERIFY_STRICT")
    return StartupSettings(
        parse_int_at_least("AUTOTUNE_VERIFY_EVERY", every, 0) if every is not None and str(every).strip() else 0,
        parse_bool("AUTOTUNE_VERIFY_STRICT", strict) if strict is not None and str(strict).strip() else False)


def derived_mode(policy: AutotunePolicy, torch_deterministic) -> AutotunePolicy:
    """The policy as carried out once its derived mode is settled at the first launch: pinned when
    no setting chose the mode and a determinism request is on, else ``policy`` itself.
    ``torch_deterministic``: the request's name (torch's flag, Inductor's deterministic or
    batch_invariant config, vLLM's batch-invariant switch: adapters.torch_flags), or a bool."""
    if policy.mode_from != DERIVED or not torch_deterministic:
        return policy
    reason = torch_deterministic if isinstance(torch_deterministic, str) else \
        "torch.are_deterministic_algorithms_enabled()"
    return replace(policy, mode="pinned", mode_from=f"{reason}, found at the first launch")


def ineffective_settings(policy: AutotunePolicy, startup: StartupSettings) -> list[str]:
    """Settings of ``policy`` that can do nothing in its mode, each as one warning line.  (Those
    whose effect depends on the kernels that run are checked at exit: see api.)"""
    default = AutotunePolicy()
    found = []
    if (policy.verify_strict or startup.verify_strict) and not startup.verify_every:
        found.append("AUTOTUNE_VERIFY_STRICT=1 without AUTOTUNE_VERIFY_EVERY: no barrier is checked; it applies only "
                     "where the program calls autotune_guard.verify_choices() itself")
    for var, value in policy.startup_given:
        if var == "AUTOTUNE_VERIFY_EVERY" and value != startup.verify_every:
            found.append(f"AUTOTUNE_VERIFY_EVERY={value} given to install() is not applied: checks follow the value "
                         f"the environment gave at start-up ({startup.verify_every}), so that every rank counts the "
                         "same barriers")
    pinned_only = [(f"AUTOTUNE_{name.upper()}", getattr(policy, name)) for name in ("on_miss", "block_sizes", "table_path")
                   if not _consensus_uses(policy, name) and getattr(policy, name) != getattr(default, name)]
    if policy.mode != "pinned":
        for var, value in pinned_only:
            found.append(f"{var}={_show(value)} has an effect in pinned mode only, and the mode is {policy.mode} "
                         f"(from {policy.mode_from}): it is ignored")
    if policy.pool_runs != default.pool_runs and (policy.mode != "consensus" or not policy.table_path):
        found.append(f"AUTOTUNE_POOL_RUNS={policy.pool_runs} pools a table's winners over cold runs in consensus mode "
                     f"with AUTOTUNE_TABLE_PATH only, and the mode is {policy.mode}"
                     f"{'' if policy.table_path else ' without a table path'}: it is ignored")
    for name in ("consensus_timeout", "consensus_dead_after", "consensus_split"):
        if getattr(policy, name) != getattr(default, name) and policy.mode != "consensus":
            found.append(f"AUTOTUNE_{name.upper()}={getattr(policy, name):g} has an effect in consensus mode only, "
                         f"and the mode is {policy.mode}: it is ignored")
    for name in ("retime_rounds", "retime_band"):
        if getattr(policy, name) != getattr(default, name) and policy.mode not in ("consensus", "record"):
            found.append(f"AUTOTUNE_{name.upper()}={getattr(policy, name):g} has an effect in consensus and record "
                         f"modes only (where the guard times for others), and the mode is {policy.mode}: it is ignored")
    if policy.table_store_down != default.table_store_down and not store_urls(policy.table_path):
        found.append(f"AUTOTUNE_TABLE_STORE_DOWN={policy.table_store_down} without a table store URL (redis://...) in "
                     "AUTOTUNE_TABLE_PATH: it is ignored")
    if policy.deterministic and policy.mode not in ("pinned",) and policy.mode_from == "AUTOTUNE_MODE":
        found.append(f"AUTOTUNE_DETERMINISTIC=1 with AUTOTUNE_MODE={policy.mode}: the explicit mode wins and choices "
                     "are not pinned")
    return found


def _consensus_uses(policy: AutotunePolicy, name: str) -> bool:
    """Consensus reads a table path, and with one refuses a stale entry under AUTOTUNE_ON_MISS=error."""
    if policy.mode != "consensus":
        return False
    return name == "table_path" or (name == "on_miss" and policy.on_miss == "error" and bool(policy.table_path))


def _show(value) -> str:
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return ",".join(f"{k}={v}" for k, v in value)
    if isinstance(value, tuple):
        return os.pathsep.join(hide_password(str(v)) for v in value)  # a store URL's password is never said
    return str(value)


def describe(policy: AutotunePolicy) -> str:
    """One line naming every setting that differs from the default."""
    default = AutotunePolicy()
    parts = [f"mode={policy.mode}"]
    for f in fields(policy):
        if f.name != "mode" and f.compare and getattr(policy, f.name) != getattr(default, f.name):
            value = getattr(policy, f.name)
            parts.append(f"{f.name}={_show(value) if f.name == 'table_path' else value}")
    return " ".join(parts)




def unmatched_settings(policy: AutotunePolicy, launched: Mapping[str, set]) -> list[str]:
    """Settings the kernels that ran made ineffective, one warning line each: a module prefix, a
    config-invariant name or an AUTOTUNE_BLOCK_SIZES parameter that matched none of the autotuners
    launched (``launched``: kernel -> its meta-parameter names)."""
    names = sorted(launched)
    listing = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    count = f"{len(names)} autotuner{'s' * (len(names) != 1)} launched ({listing})"
    found = []
    for prefix in policy.modules:
        if not any(n == prefix or n.startswith(prefix + ".") for n in names):
            found.append(f"AUTOTUNE_MODULES: {prefix!r} matched none of the {count}; kernels outside "
                         "AUTOTUNE_MODULES ran unguarded")
    for name in policy.config_invariant:
        if not any(n == name or n.rpartition(".")[2] == name for n in names):
            found.append(f"AUTOTUNE_CONFIG_INVARIANT: {name!r} matched none of the {count}")
    if policy.mode == "pinned" and policy.block_sizes:
        params = set().union(*(launched[n] for n in names if policy.in_scope(n)))
        for name, _ in policy.block_sizes:
            if name not in params:
                found.append(f"AUTOTUNE_BLOCK_SIZES: {name} is a meta-parameter of none of the {count} (theirs: "
                             f"{', '.join(sorted(params)) or 'none'}); it was ignored")
    return found
