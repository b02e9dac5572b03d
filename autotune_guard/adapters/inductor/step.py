"""The guard's ``CachingAutotuner.autotune_to_one_config``: leave exactly one launcher, chosen as the
policy says, and note the choice.

pinned: the eager pinned rule (``guard.pin``) over the same candidate descriptions, kernel name
and key, so eager and compiled calls run the same config; Inductor never times. consensus: one
rank times through Inductor's own step, the others pin its winner (``deciding.consensus.decide``, the
eager decision names). auto and record: Inductor times; the winner (and its timings) are noted.
A kernel compiled for dynamic shapes gets a per-key run (``keyed``), because Inductor drops the key.
"""

from __future__ import annotations

import logging

from ...core import consensus, tables
from ...deciding import consensus as engine
from ...core.model import Choice, record_entry, signature
from ...runtime import current
from . import keyed, names, templates

logger = logging.getLogger("autotune_guard")

TIMINGS = "_autotune_guard_timings"  # Inductor's timings of one step, kept on the autotuner until read


def autotune(self, inductor_own, args, kwargs) -> None:
    """The step under the current epoch; ``inductor_own`` is Inductor's own step (no policy, out of scope)."""
    guard = current()
    epoch = guard.epoch
    if epoch.installed is None:
        return inductor_own(self, *args, **kwargs)
    kernel = names.describe(self, args, guard.facts.get("arch"))
    if kernel.unmatched:
        say_unmatched(kernel.unmatched, kernel.qualified)
    guard.launched(epoch, kernel.qualified, kernel.parameters())
    policy = epoch.policy  # settled here: a late determinism request selects pinned
    mode = policy.mode if policy.in_scope(kernel.qualified) else "off"
    _announce(self, kernel, policy, mode)
    if mode == "off":
        return inductor_own(self, *args, **kwargs)
    if kernel.key_of is not None and names.one_key_in_program(self, kernel.key_of[0]):
        kernel.key_of = None  # compiled for static shapes: the key cannot change, no launch wrapper needed
    if mode == "pinned":
        candidates = list(self.launchers)
        index, noted = pin(kernel, kernel.choice_key, epoch)
        if not noted:  # a new policy was installed meanwhile: choose under it
            return autotune(self, inductor_own, args, kwargs)
        keep(self, index, release=kernel.key_of is None)
        if kernel.key_of is not None:
            follow_keys(self, kernel, candidates, epoch)
        return None
    if mode == "consensus":
        _consensus(self, inductor_own, kernel, epoch, args, kwargs)
    else:
        _timed(self, inductor_own, kernel, epoch, args, kwargs, "timed")
    if kernel.key_of is not None:
        follow_keys(self, kernel, None, epoch)
    return None


def say_unmatched(function: str, qualified: str) -> None:
    current().warn_once(f"unmatched|{function}", f"torch.compile user kernel {function}: its original "
                        "@triton.autotune kernel was not found among the kernels Dynamo traced; named "
                        f"{qualified} with key '*'", scope="process")


def _announce(self, kernel, policy, mode: str) -> None:
    guard = current()
    if not templates.governed() and (self.inductor_meta.get("max_autotune")
                                     or self.inductor_meta.get("max_autotune_pointwise")):
        guard.warn_once("max-autotune", "torch.compile max-autotune: Inductor's template selection "
                        "(select_algorithm) benchmarks its GEMM/conv templates while compiling; autotune_guard "
                        "governs the kernels' configs, not that choice", scope="process")
    if policy.enumerate:
        how = {"off": "left to Inductor (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(
            mode, "timed")
        logger.info("torch.compile kernel %s key (%s): %d candidates, %s", kernel.qualified, kernel.choice_key.key,
                    len(kernel.descriptors), how)


def pin(kernel, choice_key, epoch) -> tuple[int, bool]:
    """The eager pinned rule's candidate for ``choice_key`` under ``epoch``, and whether it was noted
    (False: another policy was installed meanwhile)."""
    guard = current()
    pick = guard.pin(epoch, choice_key, kernel.descriptors)
    chosen = signature(kernel.descriptors[pick.index])
    noted = guard.note(epoch, choice_key, Choice(chosen, "pinned"))
    logger.debug("pinned (torch.compile) %s -> %s (%s)", choice_key.what(), chosen, pick.why)
    return pick.index, noted


def keep(self, index: int, release: bool = True) -> None:
    """Leave the chosen launcher as the kernel's only one, as Inductor's own step does."""
    chosen = self.launchers[index]
    free = getattr(self, "_release_static_launchers_except", None)  # torch 2.13: frees the losers
    if release and callable(free):
        free(chosen)
    self.launchers = [chosen]


def follow_keys(self, kernel, candidates, epoch) -> None:
    """Follow the tuning key of a kernel compiled for dynamic shapes on its own launches: pinned
    switches to the launcher pinned for each new key (``candidates``: every launcher); other modes
    note each new key with the launcher Inductor kept, as ``reused``. New keys are chosen under
    ``epoch``, the one the kernel was tuned under. A decided key's launch is Inductor's steady
    path written out with the key's launcher in it (``keyed.follow``)."""
    first = self.launchers[0]
    keyed.follow(self, kernel.key_of, lambda key: _launcher_for_key(kernel, key, candidates, first, epoch))


def _launcher_for_key(kernel, key: str, candidates, first, epoch):
    choice_key = kernel.choice_key._replace(key=key)
    if candidates is not None:  # noted nowhere when another policy is in force: the kernel keeps its rule
        return candidates[pin(kernel, choice_key, epoch)[0]]
    current().note(epoch, choice_key, Choice(signature(names.project(first.config, kernel.meta_names)), "reused"))
    return first


def keep_timings(self, timings) -> None:
    """Inductor's timings of every launcher, for the step that asked for them (``_timed``)."""
    self.__dict__[TIMINGS] = timings


def _timed(self, inductor_own, kernel, epoch, args, kwargs, how: str, for_job: bool = False) -> str:
    """Inductor's own timing; the winner (and in a record its timings) noted, and with ``for_job``
    handed to the table writer. Returns its signature."""
    self.__dict__.pop(TIMINGS, None)
    inductor_own(self, *args, **kwargs)
    (launcher,) = self.launchers
    winner = names.project(launcher.config, kernel.meta_names)
    chosen = signature(winner)
    timings = self.__dict__.pop(TIMINGS, None)
    record = None
    if epoch.policy.record_path:
        measured = None
        if timings:
            measured = {signature(names.project(l.config, kernel.meta_names)): [float(t)] for l, t in timings.items()}
        record = record_entry(winner, chosen, how, measured, kernel.descriptors)
    if for_job and epoch.policy.table_path and len(kernel.descriptors) > 1:
        current().tuned_for_job(epoch, kernel.choice_key, winner)
    current().note(epoch, kernel.choice_key, Choice(chosen, how), record)
    return chosen


def _consensus(self, inductor_own, kernel, epoch, args, kwargs) -> None:
    """One rank of the job times this kernel through Inductor's own step and publishes the winner;
    the others pin it (eager consensus's protocol and decision names: one decision for both). With
    AUTOTUNE_TABLE_PATH the table's entry decides untimed, and a winner timed here grows the table."""
    guard = current()
    key = kernel.choice_key
    store = guard.job_store(key)
    if store is None:
        _alone(self, inductor_own, kernel, epoch, args, kwargs)
        return
    signatures = [signature(d) for d in kernel.descriptors]

    table = _table_index(kernel, epoch)  # its entry goes with the claim and decides for the job untimed

    def tune():  # on the claimer only, when its table lacks the key
        return _timed(self, inductor_own, kernel, epoch, args, kwargs, "consensus", for_job=True)

    index, tuned_here, _ = engine.decide(
        store, key.what(), consensus.decision_name(key.arch, key.kernel, key.key),
        guard.facts.ask("rank_now", (0, 1))[0], signatures, tune, epoch.policy.consensus_timeout,
        dead_after=epoch.policy.consensus_dead_after, from_table=None if table is None else signatures[table])
    if tuned_here:
        return
    keep(self, index)
    how = "table" if index == table else "consensus"  # "table": the job followed this rank's entry too
    guard.note(epoch, key, Choice(signatures[index], how), _record(kernel, epoch, index))


def _alone(self, inductor_own, kernel, epoch, args, kwargs) -> None:
    """No process group: the table's entry, else Inductor times for this process alone."""
    guard = current()
    index = _table_index(kernel, epoch)
    if index is not None:
        keep(self, index)
        guard.note(epoch, kernel.choice_key, Choice(signature(kernel.descriptors[index]), "pinned"))
        return
    guard.warn_once("torch.compile consensus alone", "AUTOTUNE_MODE=consensus without a torch.distributed "
                    "process group: torch.compile kernels are timed by this process alone, as in auto mode",
                    logging.INFO, scope="process")
    _timed(self, inductor_own, kernel, epoch, args, kwargs, "timed", for_job=guard.facts.ask("rank_now", (0, 1))[1] == 1)


def _record(kernel, epoch, index):
    if not epoch.policy.record_path:
        return None
    desc = kernel.descriptors[index]
    return record_entry(desc, signature(desc), "consensus", None, kernel.descriptors)


def _table_index(kernel, epoch):
    """The candidate AUTOTUNE_TABLE_PATH's tables hold for the kernel's key, matched as pinned does."""
    if not epoch.policy.table_path:
        return None
    guard = current()
    key = kernel.choice_key
    entry = guard.table_entry(epoch, key.arch, key.kernel, key.key)
    index = tables.table_index(entry, kernel.descriptors, guard.facts.get("config_defaults") or {})
    if entry is not None and index is None:
        guard.warn_once(f"consensus table miss {key.text()}", f"the table entry for {key.what()} matches no "
                        "candidate; it is tuned instead")
    return index
