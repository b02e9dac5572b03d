"""What each process of an acceptance job picked, and (one audit job) how good every candidate is.

Measurement only, imported by ``sitecustomize`` when asked:

* ``ACCEPT_PICKS=1``: at exit, ``$ACCEPT_CALLS/picks.<pid>.json`` holds every Triton autotuner's
  ``cache`` as the guard's tables spell it (``module.function`` -> key text -> config signature),
  every Inductor kernel down to one launcher (name -> size hints -> config signature),
  and under the guard its choice log (what it launched: a pinned choice is not in ``cache``).
  Inductor's generated kernels are named as the guard's tables name them (``inductor.<hash>``).
* ``ACCEPT_AUDIT=1`` (a plain job of one rank, alone on the GPU): each key Triton tunes is timed
  again carefully with Triton's own ``_bench``: every candidate once, then those within 5 % of the
  best in ``ACCEPT_AUDIT_ROUNDS`` (20) interleaved rounds, alternating order; the medians go into
  ``$ACCEPT_CALLS/audit.<pid>.json``. Inductor's generated kernels from Inductor's own pass and its
  ``bench``, every launcher in the rounds (a few µs-long launchers a key: cheap; judged on a single
  timing, a config the guard's rounds put ahead or tied came out 7-12 % behind); a failure is said on
  stderr, never raised.
"""

import atexit
import gc
import json
import os
import statistics
import sys

AUDIT = {}  # kernel -> key text -> {"first": {sig: ms}, "careful": {sig: ms}, "triton": sig}
BAND = 1.05


def _names():
    from autotune_guard.core.model import descriptor, key_text, qualified_name, signature

    return (lambda config: signature(descriptor(config))), key_text, qualified_name


def _kernel_function(tuner):  # as the guard names it (seam.kernel_function)
    return getattr(tuner, "base_fn", None) or tuner.fn


def _triton_picks():
    from triton.runtime.autotuner import Autotuner

    sig, key_text, qualified_name = _names()
    found = {}
    for tuner in [o for o in gc.get_objects() if issubclass(type(o), Autotuner)]:
        cache = dict(tuner.cache)
        if cache and len(tuner.configs) > 1:
            found.setdefault(qualified_name(_kernel_function(tuner)), {}).update(
                {key_text(key): sig(config) for key, config in cache.items()})
    return found


def _inductor_picks():
    """Inductor's generated kernels down to one launcher, named as the guard's tables name them."""
    heuristics = sys.modules.get("torch._inductor.runtime.triton_heuristics")  # none where nothing compiled
    if heuristics is None:
        return {}
    from autotune_guard.adapters.inductor import names
    from autotune_guard.core.model import signature

    found = {}
    for tuner in [o for o in gc.get_objects() if issubclass(type(o), heuristics.CachingAutotuner)]:
        launchers = getattr(tuner, "launchers", None) or []  # Inductor drops ``configs`` once tuned
        if len(launchers) == 1 and not getattr(tuner, "custom_kernel", False):
            key = names.size_hints_text(getattr(tuner, "size_hints", None))
            found.setdefault(names.kernel_name(tuner)[0], {})[key] = signature(names.project(launchers[0].config, None))
    return found


def _guard_choices():
    """The guard's own log of this process's choices (``arch|kernel|key`` -> ``signature;how``):
    under the guard Triton's ``cache`` is not where a pinned choice lives."""
    if "autotune_guard" not in sys.modules:
        return {}
    try:
        return dict(sys.modules["autotune_guard"].choice_log())
    except Exception as error:  # not installed in this process (a compile worker)
        return {"error": repr(error)}


def _write_audit():  # after each key: a job killed at its timeout keeps the keys audited so far
    with open(os.path.join(os.environ["ACCEPT_CALLS"], f"audit.{os.getpid()}.json"), "w") as out:
        json.dump(AUDIT, out, indent=1)


def _write():
    folder = os.environ["ACCEPT_CALLS"]
    found = {"rank": os.environ.get("RANK", "0"), "triton": _triton_picks(), "inductor": _inductor_picks(),
             "guard": _guard_choices()}
    with open(os.path.join(folder, f"picks.{os.getpid()}.json"), "w") as out:
        json.dump(found, out, indent=1)


def _time(tuner, config, args, kwargs):
    found = tuner._bench(*args, config=config, **kwargs)
    return float(found[0] if isinstance(found, (list, tuple)) else found)


def _keep(kernel, key, sigs, first, time_one, own, band=BAND):
    """The audit of one key from its first pass (``first``: index -> ms): the candidates within
    ``band`` of the best timed again (``time_one(index)``) in interleaved rounds, alternating order;
    their medians kept with the first pass and the library's own pick (``own``), and written."""
    best = min(first.values())
    contenders = [i for i, t in first.items() if t <= best * band]
    rounds = {i: [] for i in contenders}
    for r in range(int(os.environ.get("ACCEPT_AUDIT_ROUNDS", "20"))):
        for i in (contenders if r % 2 == 0 else contenders[::-1]):
            rounds[i].append(time_one(i))
    AUDIT.setdefault(kernel, {})[key] = {
        "first": {sigs[i]: t for i, t in first.items()},
        "careful": {sigs[i]: statistics.median(ts) for i, ts in rounds.items()},
        "triton": own}  # the library's own pick (Inductor's, for its kernels)
    _write_audit()


def _careful(tuner, key, args, kwargs):
    """Every candidate Triton timed for ``key``, with Triton's ``_bench``."""
    sig, key_text, qualified_name = _names()
    configs = list(getattr(tuner, "configs_timings", None) or tuner.configs)
    if len(configs) < 2:
        return
    tuner.nargs = dict(zip(tuner.arg_names, args))
    try:
        time_one = lambda i: _time(tuner, configs[i], args, kwargs)  # noqa: E731
        _keep(qualified_name(_kernel_function(tuner)), key_text(key), [sig(c) for c in configs],
              {i: time_one(i) for i in range(len(configs))}, time_one, sig(tuner.cache[key]))
    finally:
        tuner.nargs = None


def _careful_inductor(tuner, launchers, timings, args, kwargs):
    """Inductor's one pass (``timings``) as the first, then rounds of Inductor's own ``bench``."""
    from autotune_guard.adapters.inductor import names
    from autotune_guard.core.model import signature

    if len(launchers) < 2 or getattr(tuner, "custom_kernel", False):
        return
    kernel = names.describe(tuner, args, "audit")
    sigs = [signature(d) for d in kernel.descriptors]
    first = {i: float(timings[launcher]) for i, launcher in enumerate(launchers)}
    _keep(kernel.choice_key.kernel, kernel.choice_key.key, sigs, first,
          lambda i: float(tuner.bench(launchers[i], *args, **kwargs)), sigs[min(first, key=first.get)],
          band=float("inf"))


def _audited_inductor(module):
    cls = module.CachingAutotuner
    original = cls.benchmark_all_configs

    def benchmark_all_configs(self, *args, **kwargs):
        launchers = list(self.launchers)  # before Inductor closes the losers' launchers
        timings = original(self, *args, **kwargs)
        try:
            _careful_inductor(self, launchers, timings, args, kwargs)
        except Exception as error:  # measurement only: never the program's failure; said in the job's log
            sys.stderr.write(f"picks.py: could not audit {getattr(self.fn, '__name__', '?')}: {error!r}\n")
        return timings

    cls.benchmark_all_configs = benchmark_all_configs


def _audited(module):
    original = module.Autotuner.run

    def run(self, *args, **kwargs):
        before = set(self.cache)
        result = original(self, *args, **kwargs)
        for key in [k for k in self.cache if k not in before]:
            _careful(self, key, args, kwargs)
        return result

    module.Autotuner.run = run


def install():
    if os.environ.get("ACCEPT_AUDIT") == "1":
        import wrapt

        wrapt.register_post_import_hook(_audited, "triton.runtime.autotuner")
        wrapt.register_post_import_hook(_audited_inductor, "torch._inductor.runtime.triton_heuristics")
    atexit.register(_write)
