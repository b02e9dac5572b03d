"""The guard's ``CachingAutotuner.autotune_to_one_config``: leave exactly one launcher, chosen as the
policy says, and note the choice.

The step is a family of the decision engine (``deciding``): :class:`Step` describes one kernel's
choice for one key (the launchers' configs as eager describes them, so eager and compiled calls of
a kernel share one pinned rule, one table entry and one consensus decision). Its tuning is
Inductor's own step, which keeps the winner; timed for others (consensus, record) the engine times
each launcher with Inductor's ``bench`` instead, the finalists again in rounds. The engine carries out the mode; ``autotune`` keeps
the chosen launcher when the engine chose without tuning here (``deciding.first_launch``). A kernel compiled for dynamic
shapes gets a per-key run (``keyed``), because Inductor drops the key.
"""

from __future__ import annotations

import logging

from ... import deciding
from ...core.model import Choice, signature
from ...runtime import current
from . import keyed, names, seam, templates

logger = logging.getLogger("autotune_guard")

TIMINGS = "_autotune_guard_timings"  # Inductor's timings of one step, kept on the autotuner until read


class Step(deciding.Tunable):
    """One kernel's choice for one key. ``tuning``: (the CachingAutotuner, Inductor's own step,
    its args, its kwargs), None for a key only pinned here (a dynamic-shape kernel's new key)."""

    noun = "torch.compile kernels"

    def __init__(self, kernel, key=None, tuning=None):
        self.kernel, self.tuning = kernel, tuning
        self.key = kernel.choice_key if key is None else key
        self.descriptors = kernel.descriptors

    @property
    def splits(self) -> bool:
        """Inductor times one launcher on its own (``CachingAutotuner.bench``): the engine's rounds."""
        return self.tuning is not None and seam.can_bench(self.tuning[0])

    def time_share(self, indices) -> dict:
        """Each launcher at ``indices`` timed by Inductor's ``bench`` (its clones of mutated args,
        its resets to zero), in that order; nothing kept: the chosen one is kept by ``autotune``."""
        autotuner, _, args, kwargs = self.tuning
        launchers = seam.launchers_of(autotuner)
        return {i: seam.time_launcher(autotuner, launchers[i], args, kwargs) for i in indices}

    def tune(self, how: str) -> deciding.Tuned:
        """Inductor's own step: it times every launcher and keeps the fastest."""
        autotuner, inductor_own, args, kwargs = self.tuning
        autotuner.__dict__.pop(TIMINGS, None)
        inductor_own(autotuner, *args, **kwargs)
        launcher = seam.only_launcher(autotuner)
        meta_names = self.kernel.meta_names
        timings = autotuner.__dict__.pop(TIMINGS, None)
        measured = None
        if timings:
            measured = {signature(names.project(seam.launcher_config(l), meta_names)): [float(t)]
                        for l, t in timings.items()}
        return deciding.Tuned(names.project(seam.launcher_config(launcher), meta_names), launcher, measured)


def autotune(self, inductor_own, args, kwargs) -> None:
    """The step under the current epoch; ``inductor_own`` is Inductor's own step (no policy, out of scope)."""
    guard = current()
    epoch = guard.epoch
    if epoch.installed is None:
        return inductor_own(self, *args, **kwargs)
    kernel = names.describe(self, args, guard.facts.get("arch"))
    if kernel.unmatched:
        say_unmatched(guard, kernel.unmatched, kernel.qualified)
    guard.launched(epoch, kernel.qualified, kernel.parameters())
    policy = epoch.policy  # settled here: a late determinism request selects pinned
    mode = policy.mode if policy.in_scope(kernel.qualified) else "off"
    _announce(guard, self, kernel, policy, mode)
    if mode == "off":
        return inductor_own(self, *args, **kwargs)
    if kernel.key_of is not None and names.one_key_in_program(self, kernel.key_of[0]):
        kernel.key_of = None  # compiled for static shapes: the key cannot change, no launch wrapper needed
    candidates = seam.launchers_of(self)
    pinned = mode == "pinned"

    def apply(index, tuned):
        if tuned is None:  # chosen without tuning here: the chosen launcher is the only one
            keep(self, index, release=not (pinned and kernel.key_of is not None))
        if kernel.key_of is not None:
            follow_keys(self, kernel, candidates if pinned else None, epoch)
        return None  # the step launches nothing: Inductor's run launches the launcher kept

    step = Step(kernel, tuning=(self, inductor_own, args, kwargs))
    return deciding.first_launch(epoch, lambda: step, apply, lambda: autotune(self, inductor_own, args, kwargs))


def say_unmatched(guard, function: str, qualified: str) -> None:
    guard.warn_once(f"unmatched|{function}", f"torch.compile user kernel {function}: its original "
                    "@triton.autotune kernel was not found among the kernels Dynamo traced; named "
                    f"{qualified} with key '*'", scope="process", name="unmatched-user-kernel")


def _announce(guard, self, kernel, policy, mode: str) -> None:
    if not templates.governed() and seam.asks_max_autotune(self):
        guard.warn_once("max-autotune", "torch.compile max-autotune: Inductor's template selection "
                        "(select_algorithm) benchmarks its GEMM/conv templates while compiling; autotune_guard "
                        "governs the kernels' configs, not that choice", scope="process")
    if policy.enumerate:
        how = {"off": "left to Inductor (out of scope)", "pinned": "pinned", "consensus": "consensus"}.get(
            mode, "timed")
        logger.info("torch.compile kernel %s key (%s): %d candidates, %s", kernel.qualified, kernel.choice_key.key,
                    len(kernel.descriptors), how)


def keep(self, index: int, release: bool = True) -> None:
    """Leave the chosen launcher as the kernel's only one, as Inductor's own step does."""
    seam.keep_only(self, seam.launchers_of(self)[index], release)


def follow_keys(self, kernel, candidates, epoch):
    """Follow the tuning key of a kernel compiled for dynamic shapes on its own launches: pinned
    switches to the launcher pinned for each new key (``candidates``: every launcher); other modes
    note each new key with the launcher Inductor kept, as ``reused``. New keys are chosen under
    ``epoch``, the one the kernel was tuned under. A decided key's launch is Inductor's steady
    path written out with the key's launcher in it (``keyed.follow``); returns its Patch."""
    first = seam.launchers_of(self)[0]
    return keyed.follow(self, kernel.key_of, lambda key: _launcher_for_key(kernel, key, candidates, first, epoch))


def _launcher_for_key(kernel, key: str, candidates, first, epoch):
    choice_key = kernel.choice_key._replace(key=key)
    if candidates is not None:  # noted nowhere when another policy is in force: the kernel keeps its rule
        return candidates[deciding.pinned(epoch, Step(kernel, choice_key)).index]
    current().note(epoch, choice_key, Choice(signature(names.project(seam.launcher_config(first), kernel.meta_names)),
                                             "reused"))
    return first


def keep_timings(self, timings) -> None:
    """Inductor's timings of every launcher, for the step that asked for them (``Step.tune``)."""
    self.__dict__[TIMINGS] = timings
