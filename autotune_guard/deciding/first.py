"""The apply half of the family protocol: what every family does at a key's first launch once the
engine has decided, written once (``first_launch``), so that no family keeps a decision noted under
a policy that is no longer installed, and each returns a tuning launch's result the same way."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from ..runtime import Epoch
from .engine import Decision, Tunable, Tuned, decide


def first_launch(epoch: Epoch, pending: Callable[[], Tunable | None],
                 apply: Callable[[int | None, Tuned | None], Callable[[], Any] | None],
                 again: Callable[[], Any], gate=None,
                 deciding: Callable[[Epoch, Tunable], Decision] = decide) -> Any:
    """Decide a key's choice under ``epoch`` and apply it; returns the launch's result.

    Under ``gate`` (the family's lock of one key's decision, if any): ``pending()`` is the key's
    Tunable, or None where another thread decided the key while this one waited; the engine
    (``deciding``) decides it; then ``apply(index, tuned)`` keeps the key's choice and returns how
    to launch it (a callable, run after the gate):
    - this process's tuning launch ran the kernel (``tuned``): ``apply(index, tuned)`` keeps its
      winner, and what that launch returned is the result (nothing launched again);
    - nothing was noted (another policy was installed while deciding): nothing is kept, and
      ``again()``, the family's first launch once more, runs under the policy in force now;
    - else ``apply(index, None)`` keeps candidate ``index`` (None: the key was decided already,
      or the family's own tuner deferred it) and its launch runs untimed.
    """
    with gate if gate is not None else contextlib.nullcontext():
        tunable = pending()
        if tunable is None:
            launch = apply(None, None)
        else:
            decision = deciding(epoch, tunable)
            tuned = decision.tuned
            if tuned is not None and tuned.launched:
                apply(decision.index, tuned)
                return tuned.result
            launch = apply(decision.index, None) if decision.noted else again
    return launch() if launch is not None else None
