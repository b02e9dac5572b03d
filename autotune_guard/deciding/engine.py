"""One ``decide`` for every family: pinned (with the provenance check), timed (auto and record),
consensus (the table's entry, the job's Store, a process alone, table growth); every choice is
noted in the epoch's choice log here, with its record entry in record mode.

A family subclasses :class:`Tunable` for one pending choice and applies the :class:`Decision`.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, Sequence

from ..core import consensus as protocol
from ..core import tables
from ..core.errors import SelectionError
from ..core.selection import UNTIMED
from ..core.model import TABLE, Choice, ChoiceKey, how_of_pick, record_entry, signature, tuned_winner
from ..core.pinned import Pick
from ..runtime import Epoch, current
from . import consensus, pooling, retime, split, table_checks

logger = logging.getLogger("autotune_guard")


class Tuned(NamedTuple):
    """What a family's tuning gave: the winner's descriptor; the live object it is (a Config, a
    launcher; for the family's own use); the timings by signature (None: nothing timed here); what
    the tuning launch returned; and ``how`` where the family knows better than the mode (Inductor's
    autotune cache answered: ``cache hit``)."""

    winner: dict
    chosen: Any = None
    timings: dict | None = None
    result: Any = None
    how: str | None = None
    launched: bool = True  # False: the candidates were timed, the winner not launched for the caller
    measured: dict | None = None  # what the selection measured (``retime.summary``), for records and tables


class Decision(NamedTuple):
    """The engine's answer. ``index``: the chosen candidate among the tunable's descriptors (None
    when this process tuned and its winner is none of them, or the choice was deferred). ``tuned``:
    set when this process tuned (its tuning launch already ran). ``noted``: False when another
    policy was installed meanwhile (nothing was noted; the family chooses again under it)."""

    index: int | None
    how: str
    tuned: Tuned | None = None
    noted: bool = True


class Tunable:
    """One pending choice of one family. Subclasses set ``key`` and ``descriptors`` (the live
    candidates after pruning) and implement ``tune``; the rest has defaults."""

    key: ChoiceKey
    descriptors: Sequence[dict] = ()
    noun = "choices"  # how the engine's messages name this family's choices
    uses_config_defaults = True  # a table entry matches with Triton's Config defaults filled in
    # An open search finds configs outside its candidates (Helion's full search): consensus
    # publishes the winner's config with it, and a follower adopts it (``config_of``, ``adopt``).
    open_search = False

    def every(self) -> Sequence[dict]:
        """Every candidate, before pruning: a record's ``candidates``."""
        return self.descriptors

    def provenance(self) -> dict | None:
        """What the kernel is (source, candidates, options hashes), kept with a record or table entry."""
        return None

    def check_provenance(self) -> None:
        """Before the pinned rule, and before a table's entry decides: a table entry for this key
        recorded against another version of the kernel is named (or refused); nothing when the
        tables hold no entry for the key (the family looks)."""

    def pick(self, epoch: Epoch) -> Pick:
        """The pinned rule's candidate (table, block sizes, on-miss, chaos)."""
        return current().pin(epoch, self.key, list(self.descriptors), None if self.uses_config_defaults else {})

    def tune(self, how: str) -> Tuned | None:
        """Time the candidates here (the family's own tuner); None when the family's tuner deferred
        the choice (it is noted later, by the family)."""
        raise NotImplementedError

    @property
    def splits(self) -> bool:
        """Whether :meth:`time_share` can time a share of the candidates (split tuning); a family
        that cannot is tuned by one rank for the job (the one-claimer protocol)."""
        return False

    def config_of(self, signature_text: str) -> dict | None:
        """An open search's: the descriptor of a winner it found or adopted, by its signature."""
        return next((d for d in self.descriptors if signature(d) == signature_text), None)

    def adopt(self, config: dict, signature_text: str) -> int:
        """An open search's: the job's winner, found by another rank outside these candidates, made
        one of them; its index."""
        raise NotImplementedError(f"{type(self).__name__} is not an open search")

    def signature_at(self, index: int) -> str:
        return signature(self.descriptors[index])

    def time_share(self, indices: Sequence[int]) -> dict[int, float]:
        """Time the candidates at ``indices`` of ``descriptors`` here, each on its own, nothing
        launched for the caller: ``{index: milliseconds}`` (the median; inf: it cannot run)."""
        raise NotImplementedError(f"{type(self).__name__} cannot time a share of its candidates")


def decide(epoch: Epoch, tunable: Tunable) -> Decision:
    """Carry out ``epoch``'s mode for one choice. The caller has ruled out ``off`` (out of scope)."""
    mode = epoch.policy.mode
    if mode == "pinned":
        return pinned(epoch, tunable)
    if mode == "consensus":
        return _consensus(epoch, tunable)
    return timed(epoch, tunable, "timed")


def pinned(epoch: Epoch, tunable: Tunable) -> Decision:
    """The pinned rule, untimed, noted as what picked it (``table``, ``fallback (min_cost)``, ...)."""
    tunable.check_provenance()
    pick = tunable.pick(epoch)
    chosen, how = signature(tunable.descriptors[pick.index]), how_of_pick(pick.why)
    noted_here = current().note(epoch, tunable.key, Choice(chosen, how))
    logger.debug("pinned %s -> %s (%s)", tunable.key.what(), chosen, pick.why)
    return Decision(pick.index, how, None, noted_here)


def timed(epoch: Epoch, tunable: Tunable, how: str, for_job: bool = False) -> Decision:
    """The family's tuner times the candidates here; the winner noted as ``how``. ``for_job``: it
    was timed for the whole job, and a table directory grows by it. Timed for others (``for_job``,
    or a record that becomes a table), the finalists are timed again (``selected``)."""
    others = for_job or epoch.policy.mode == "record"
    tuned = selected(epoch, tunable, how) if others else tunable.tune(how)
    if tuned is None:
        return Decision(None, how)
    return Decision(_index_of(tunable, tuned.winner), tuned.how or how, tuned,
                    noted(epoch, tunable, tuned, how, for_job))


def selected(epoch: Epoch, tunable: Tunable, how: str, known: tuple | None = None,
             only: Sequence[int] | None = None) -> Tuned | None:
    """A winner worth freezing, where the family can time one candidate (``splits``): every
    candidate timed once, the finalists again in rounds (``deciding.retime``), nothing launched for
    the caller. ``known``: (timings a table kept by index, the winner it kept): only the other
    candidates are timed, and the kept winner stands unless one of them is a finalist. ``only``: the
    indices to time (a pooling run's contenders); by default every candidate.
    A family that cannot time one candidate is tuned by its own tuner, in one pass."""
    if not tunable.splits or len(tunable.descriptors) < 2:
        return tunable.tune(how)
    signatures = [signature(d) for d in tunable.descriptors]
    policy = epoch.policy
    timings_kept, kept = known if known is not None else (None, None)
    found = retime.select(tunable.time_share, only if only is not None else range(len(signatures)),
                          policy.retime_band, policy.retime_rounds, timings_kept, kept)
    measured = retime.summary(found, signatures, policy.retime_band, table_checks.measured_on(tunable.key.arch))
    if found.verdict.how == UNTIMED:  # plain Triton launches its first config: so does the guard, and says so
        current().warn_once(f"untimed {tunable.key.text()}", (
            f"{tunable.key.what()}: no candidate could be timed (each timing was inf, NaN, 0 or not a number): "
            f"the first declared, {signatures[found.verdict.winner]}, runs, as Triton runs it; it is not added to a "
            "table"))
    timings = {sig: [entry["median"]] for sig, entry in measured["candidates"].items()}
    logger.debug("selected %s -> %s (%s, %d rounds, %d timings)", tunable.key.what(), measured["winner"],
                 measured["how"], measured["rounds"], measured["timed"])
    return Tuned(tunable.descriptors[found.verdict.winner], None, timings, None, None, False, measured)


def noted(epoch: Epoch, tunable: Tunable, tuned: Tuned, how: str, for_job: bool = False,
          recorded_as: str | None = None, extends: bool = False) -> bool:
    """Note a winner this process timed (a family whose own tuner runs unasked, as Triton's does
    under auto and record, calls this when it sees the winner); False: another policy meanwhile.
    ``recorded_as``: the record's how where it says more than the log's (a winner chosen before
    this epoch is logged as timed, recorded as reused)."""
    guard = current()
    how = tuned.how or how
    winner_signature = signature(tuned.winner)
    provenance = tunable.provenance() if (epoch.policy.record_path or for_job) else None
    record = None
    if epoch.policy.record_path:
        record = record_entry(tuned.winner, winner_signature, recorded_as or how, tuned.timings,
                              list(tunable.every()), provenance, tuned.measured)
    untimed = isinstance(tuned.measured, dict) and tuned.measured.get("how") == UNTIMED
    if for_job and epoch.policy.table_path and (len(tunable.descriptors) > 1 or tunable.open_search) and not untimed:
        pooled = isinstance(tuned.measured, dict) and "pooled" in tuned.measured
        choices = {signature(d): d for d in tunable.descriptors} if pooled else None
        guard.tuned_for_job(epoch, tunable.key, tuned_winner(tuned.winner, provenance, tuned.measured, extends=extends,
                                                             replaces=epoch.retimed.get(tunable.key), choices=choices))
    return guard.note(epoch, tunable.key, Choice(winner_signature, how), record)


def table_index(epoch: Epoch, tunable: Tunable) -> int | None:
    """The live candidate AUTOTUNE_TABLE_PATH's tables hold for the key, matched as pinned mode
    matches it; None without one. An entry recorded against another version of the kernel is named
    (or refused) by the family, and under consensus timed again, as one ``report retune`` asked
    for (``epoch.retimed``); one that matches no candidate is said once, then tuned."""
    if not epoch.policy.table_path:
        return None
    guard = current()
    key = tunable.key
    entry = guard.table_entry(epoch, key.arch, key.kernel, key.key)
    if entry is None:
        return None
    tunable.check_provenance()
    if epoch.policy.mode == "consensus" and key not in epoch.retimed and \
            tables.retune_asked(epoch.tables.get(key.arch, {}), key.kernel, key.key):
        epoch.retimed[key] = "retune"
        guard.warn_once(f"retune {key.text()}", f"{key.what()}: timed again, as report retune asked; the table's "
                        "entry is replaced by the winner and kept beside it", logging.INFO)
    if key in epoch.retimed:
        return None
    defaults = (guard.facts.get("config_defaults") or {}) if tunable.uses_config_defaults else {}
    index = tables.table_index(entry, list(tunable.descriptors), defaults)
    if index is None:
        guard.warn_once(f"consensus table miss {key.text()}", f"the table entry for {key.what()} matches no live "
                        "candidate; it is tuned instead")
    return index


def _consensus(epoch: Epoch, tunable: Tunable) -> Decision:
    """One rank of the job tunes the key and publishes the winner; the others follow it untimed.
    A table's entry goes with the claim and decides for the job untimed."""
    guard = current()
    key = tunable.key
    table = table_index(epoch, tunable)
    pooled = pooling.plan(epoch, tunable, table_checks.measured_on) if table is not None else None
    known = table_checks.known(guard, epoch, tunable) if table is not None and pooled is None else None
    if known is not None or pooled is not None:
        table = None  # the kernel gained candidates since the entry was measured, or its runs are pooled
    elif table is None:
        pooling.say_first_run(guard, epoch, tunable)
    store = guard.job_store(key)
    if store is None:
        return _alone(guard, epoch, tunable, table, known, pooled)
    signatures = [signature(d) for d in tunable.descriptors]
    # settings that change where ranks meet, compared once per process on the job's Store (a node's
    # fan-in store hands compare_set to the job's)
    consensus.agree_settings(store, guard.facts.ask("rank_now", (0, 1))[0], epoch.policy.consensus_split)
    if epoch.policy.consensus_split and known is None and pooled is None and len(signatures) > 1 and tunable.splits:
        if table is None:
            return _split(guard, epoch, tunable, store, signatures)
        index = split.from_table(_job_store(store), key.what(), protocol.decision_name(
            key.arch, key.kernel, key.key), guard.facts.ask("rank_now", (0, 1))[0], signatures, signatures[table])
        return _followed(guard, epoch, tunable, index, signatures, TABLE if index == table else "consensus")

    def tune():  # on the claimer only, when its table lacks the key
        tuned = _selected_and_pooled(guard, epoch, tunable, "consensus", known, pooled)
        if tuned is None:
            raise SelectionError(f"autotune_guard consensus: {key.what()}: the tuner chose nothing")
        return signature(tuned.winner), tuned

    index, tuned_here, answer = consensus.decide(
        store, key.what(), protocol.decision_name(key.arch, key.kernel, key.key),
        guard.facts.ask("rank_now", (0, 1))[0], signatures, tune, epoch.policy.consensus_timeout,
        dead_after=epoch.policy.consensus_dead_after, from_table=None if table is None else signatures[table],
        open_search=tunable if tunable.open_search else None)
    if index is not None and index >= len(signatures):  # adopted: an open search's winner from another rank
        signatures = [signature(d) for d in tunable.descriptors]
    if tuned_here and answer is not None and answer[1] is not None:
        tuned = answer[1]
        return Decision(index, tuned.how or "consensus", tuned,
                        noted(epoch, tunable, tuned, "consensus", for_job=True,
                              extends=known is not None or pooled is not None))
    return _followed(guard, epoch, tunable, index, signatures, "table" if index == table else "consensus")


def _followed(guard, epoch: Epoch, tunable: Tunable, index: int, signatures: list, how: str,
              timings: dict | None = None, measured: dict | None = None) -> Decision:
    """Note the job's winner, which this rank did not launch: ``how`` is ``table`` where the job
    followed the entry this rank holds too; ``timings``: the job's, where every rank has them (split)."""
    key = tunable.key
    record = None
    if epoch.policy.record_path:
        desc = tunable.descriptors[index]
        record = record_entry(desc, signatures[index], how, timings, list(tunable.every()), tunable.provenance(),
                              measured)
    logger.debug("consensus %s -> %s (%s)", key.what(), signatures[index], how)
    return Decision(index, how, None, guard.note(epoch, key, Choice(signatures[index], how), record))


def _job_store(store):
    """The job's own Store: a split decision is the job's, every rank of it, never a node's fan-in."""
    return store.job if getattr(store, "node_store", None) is not None else store


def _split(guard, epoch: Epoch, tunable: Tunable, store, signatures: list) -> Decision:
    """AUTOTUNE_CONSENSUS_SPLIT=1: the ranks that reach the key each time a share of its candidates
    (``deciding.split``), one rank times the finalists again; the winner is launched afterwards by
    the family, on every rank."""
    key, policy = tunable.key, epoch.policy
    rank, world = guard.facts.ask("rank_now", (0, 1))
    store = _job_store(store)

    def finals(known):  # on one rank: the shares' timings as the first pass, the finalists again here
        found = retime.select(tunable.time_share, range(len(signatures)), policy.retime_band, policy.retime_rounds,
                              known)
        measured_on = table_checks.measured_on(key.arch)
        return found.verdict.winner, retime.summary(found, signatures, policy.retime_band, measured_on)

    index, timed_here, timings, measured, finalist = split.decide(
        store, key.what(), protocol.decision_name(key.arch, key.kernel, key.key), rank, world, signatures,
        tunable.time_share, policy.consensus_timeout, policy.consensus_dead_after, finals)
    epoch.split[key] = (timed_here, len(signatures))  # for the exit's one line on what the split saved
    # nothing timed (no candidate could be), or a rank's table entry decided: nothing for a table
    untimed = measured is None or isinstance(measured, dict) and measured.get("how") in (UNTIMED, split.TABLE_FINAL)
    if policy.table_path and finalist and not untimed:  # the rank that published the winner grows the table
        guard.tuned_for_job(epoch, key, tuned_winner(tunable.descriptors[index], tunable.provenance(), measured,
                                                     replaces=epoch.retimed.get(key)))
    return _followed(guard, epoch, tunable, index, signatures, "consensus", timings, measured)


def _alone(guard, epoch: Epoch, tunable: Tunable, table: int | None, known: tuple | None = None,
           pooled: pooling.Plan | None = None) -> Decision:
    """No process group at the moment of choice: the table's entry, else timed here as in auto (a
    job of one process grows the table by it, and pools its runs as a job of several does)."""
    if table is not None:
        chosen = signature(tunable.descriptors[table])
        return Decision(table, TABLE, None, guard.note(epoch, tunable.key, Choice(chosen, TABLE)))
    world = guard.facts.ask("rank_now", (0, 1))[1]
    if world > 1:  # a distributed job that has not initialized its group yet: choices may differ
        guard.warn_once("consensus: no process group", "AUTOTUNE_MODE=consensus but torch.distributed is not "
                        f"initialized yet (world size {world} from the environment): choices made before "
                        "init_process_group are this rank's own, timed as in auto mode", name="consensus-before-init")
    else:
        guard.warn_once(f"consensus alone: {tunable.noun}", "AUTOTUNE_MODE=consensus without a torch.distributed "
                        f"process group: {tunable.noun} are timed by this process alone, as in auto mode",
                        logging.INFO, scope="process", name="consensus-alone")
    if world != 1 or (known is None and pooled is None):
        return timed(epoch, tunable, "timed", for_job=world == 1)
    tuned = _selected_and_pooled(guard, epoch, tunable, "timed", known, pooled)
    return Decision(_index_of(tunable, tuned.winner), "timed", tuned,
                    noted(epoch, tunable, tuned, "timed", for_job=True, extends=True))


def _selected_and_pooled(guard, epoch: Epoch, tunable: Tunable, how: str, known, pooled):
    """The selection (only the new candidates where a table kept the others' timings; only the
    contenders where a pooling run times), its winner pooled with the kept runs where it pools."""
    tuned = selected(epoch, tunable, how, known, pooled.indices if pooled is not None else None)
    if tuned is not None and pooled is not None:
        tuned = pooling.pooled(guard, epoch, tunable, tuned, pooled.kept)
    return tuned


def _index_of(tunable: Tunable, winner: dict) -> int | None:
    wanted = signature(winner)
    for index, desc in enumerate(tunable.descriptors):
        if signature(desc) == wanted:
            return index
    return None
