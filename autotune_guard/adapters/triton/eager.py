"""Triton's ``Autotuner`` as a family of the decision engine (``autotune_guard.deciding``).

``TritonChoice`` is one tuning key of an autotuner (or of a library subclass of it) awaiting its
config: the live candidates after the kernel's own pruning, every declared candidate, the kernel's
provenance; it tunes through Triton's own run, whose launch is the tuning launch.

``pinned_choice`` pins a key (the swap strategy's launch, or 3.8+'s pruning); ``first_launch_of`` is a
key's first launch under consensus: decided once per key per process (its gate), then launched.
What Triton chooses itself (auto, record) is noted through ``note_winner`` as it is seen."""

from __future__ import annotations

from ...core.model import ChoiceKey, descriptor, key_text
from ...deciding import Decision, Tunable, Tuned, first_launch, noted, pinned
from ...runtime import current
from . import provenance
from .seam import can_time_one, candidates, configs_of, swap_run, tell_listener, time_configs, tuning_launch
from .registry import registry


class TritonChoice(Tunable):
    """One tuning key of an autotuner: ``call`` is the launch's (args, kwargs), from which the
    live candidates are pruned at first need; ``live`` when the caller pruned already."""

    def __init__(self, autotuner, state, tuning_key, call=None, live=None):
        self.autotuner, self.state, self.tuning_key, self.call = autotuner, state, tuning_key, call
        self.key = ChoiceKey(current().facts.get("arch"), state.qualified, key_text(tuning_key))
        self._live, self._descriptors = live, None

    @property
    def live(self) -> list:
        if self._live is None:
            args, kwargs = self.call
            with self.state.lock:  # pruning writes the arguments threads share, as Triton's run does
                self._live = candidates(self.autotuner, args, kwargs)
        return self._live

    @property
    def descriptors(self) -> list:
        if self._descriptors is None:
            self._descriptors = [descriptor(c) for c in self.live]
        return self._descriptors

    def every(self) -> list:
        return [descriptor(c) for c in configs_of(self.autotuner)]

    def provenance(self) -> dict:
        return provenance.of(self.autotuner)

    def check_provenance(self) -> None:
        provenance.check_pinned(self.autotuner, self.state, self.key)

    def chosen(self, decision: Decision):
        """The live Config the decision names (so that its hooks survive), else the one tuned."""
        if decision.index is not None:
            return self.live[decision.index]
        return decision.tuned.chosen

    def tune(self, how: str) -> Tuned:
        """Triton times the candidates in a tuning launch of its own run."""
        args, kwargs = self.call
        if self._live is not None and len(self._live) == 1:  # pruning left one: nothing to time
            with self.state.lock:
                result = swap_run(self.autotuner, self._live[0], args, kwargs)
            return Tuned(descriptor(self._live[0]), self._live[0], None, result)
        with self.state.lock:
            result, winner, timings = tuning_launch(self.autotuner, self.tuning_key, args, kwargs)
        return Tuned(descriptor(winner), winner, timings, result)


    @property
    def splits(self) -> bool:
        return self.call is not None and can_time_one(self.autotuner)

    def time_share(self, indices) -> dict:
        """Triton times each candidate at ``indices`` on its own, in that order (``seam.time_configs``):
        ``{index: [median, p20, p80]}`` as Triton's timer gives them."""
        args, kwargs = self.call
        configs = [self.live[i] for i in indices]
        with self.state.lock:
            found = time_configs(self.autotuner, configs, args, kwargs)
        return dict(zip(indices, found))


def pinned_choice(autotuner, state, key, live: list, launch, again):
    """Pin one of ``live`` (the candidates after pruning) for ``key``, note it and return
    ``launch(config)``; where a new policy was installed meanwhile, ``again()`` (the caller's
    launch under it)."""
    choice = TritonChoice(autotuner, state, key, live=live)

    def apply(index, tuned):
        config = state.selected[key] = choice.live[index]
        tell_listener(autotuner, key, config)
        return lambda: launch(config)

    return first_launch(state.epoch, lambda: choice, apply, again, deciding=pinned)


def first_launch_of(autotuner, state, key, args, kwargs):
    """A key's first launch under a deciding strategy (consensus): decided once per key per
    process (its gate), then run (unless deciding ran it: this process tuned it)."""
    registry().heard.value = None
    choice = TritonChoice(autotuner, state, key, (args, kwargs))

    def apply(index, tuned):
        if index is not None:
            config = choice.live[index]
        else:  # this process's tuning winner, else another thread's decision
            config = tuned.chosen if tuned is not None else state.selected[key]
        state.selected[key] = config
        if tuned is not None:  # Triton's tuning launch ran it
            _told(autotuner, key, config)
            return None
        return lambda: _launch(autotuner, state, key, config, args, kwargs)

    return first_launch(state.epoch, lambda: None if state.selected.get(key) is not None else choice, apply,
                        lambda: autotuner.run(*args, **kwargs), gate=registry().gate(autotuner, key))


def _launch(autotuner, state, key, config, args, kwargs):
    with state.lock:
        launched = swap_run(autotuner, config, args, kwargs)
    _told(autotuner, key, config)
    return launched


def _told(autotuner, key, config) -> None:
    heard = getattr(registry().heard, "value", None)
    if heard is None or heard[0] != key:
        tell_listener(autotuner, key, config)  # Triton told listeners only if it timed


def note_winner(autotuner, state, key, config, how: str, timings=None, recorded_as=None, measured=None) -> bool:
    """Note a winner Triton chose itself (auto, record); False: another policy meanwhile.
    ``measured``: what record's re-timing of Triton's finalists measured (``observe.reselect``)."""
    desc = descriptor(config)
    return noted(state.epoch, TritonChoice(autotuner, state, key), Tuned(desc, config, timings, measured=measured),
                 how, recorded_as=recorded_as)
