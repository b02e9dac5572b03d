"""A LibTuner modelled on FlagGems 5.0.2's (``flag_gems/utils/libentry.py``), for TRITON_INTERPRET=1.

As FlagGems' does: a subclass of Triton's ``Autotuner`` whose ``run`` never calls Triton's; its
``cache`` is a view of a persistent SQLite database (winners per config table and key) and its
``bench`` reads and writes the database's timings per key and config before it times; its key is
``get_key`` (the key arguments through per-key strategies such as ``align32``, then the dtypes);
``policy`` is a static method given ``bench``, the pruned configs and the arguments; subclasses
are registered by name (``register_policy``). Only the timer differs: ``TIMER_CALLS`` counts it,
and it returns a random time (so that only governance makes two processes agree).

The database is ``$LIBTUNER_DB`` (a file per test: it persists across processes, as FlagGems' does).
"""

import hashlib
import math
import os
import random
import sqlite3
import time
from itertools import starmap

import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

TIMER_CALLS = []


def _timer(kernel_call, quantiles=None, **ignored):
    kernel_call()
    TIMER_CALLS.append(1)
    t = random.random()
    return [t, t * 0.9, t * 1.1]


def _db():
    connection = sqlite3.connect(os.environ["LIBTUNER_DB"])
    connection.execute("CREATE TABLE IF NOT EXISTS configs (tbl TEXT, key TEXT, config TEXT, PRIMARY KEY (tbl, key))")
    connection.execute("CREATE TABLE IF NOT EXISTS bench (tbl TEXT, key TEXT, config TEXT, times TEXT, "
                       "PRIMARY KEY (tbl, key, config))")
    return connection


def _config_text(config):
    return repr((sorted(config.kwargs.items()), config.num_warps, config.num_stages))


def _config_of(text):
    kwargs, num_warps, num_stages = eval(text)  # our own repr above
    return triton.Config(dict(kwargs), num_warps=num_warps, num_stages=num_stages)


class ConfigCache:
    """Winners by key in the database (FlagGems' ``ConfigCache``)."""

    def __init__(self, table):
        self.table = table

    def get(self, key):
        with _db() as db:
            row = db.execute("SELECT config FROM configs WHERE tbl=? AND key=?", (self.table, repr(key))).fetchone()
        return None if row is None else _config_of(row[0])

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key, config):
        with _db() as db:
            db.execute("INSERT OR REPLACE INTO configs VALUES (?, ?, ?)", (self.table, repr(key), _config_text(config)))


class BenchmarkCache:
    """Timings by key and config in the database (FlagGems' ``BenchmarkCache``)."""

    def __init__(self, table, key):
        self.table, self.key = table, repr(key)

    def get(self, config):
        with _db() as db:
            row = db.execute("SELECT times FROM bench WHERE tbl=? AND key=? AND config=?",
                             (self.table, self.key, _config_text(config))).fetchone()
        return None if row is None else eval(row[0])

    def __setitem__(self, config, times):
        with _db() as db:
            db.execute("INSERT OR REPLACE INTO bench VALUES (?, ?, ?, ?)",
                       (self.table, self.key, _config_text(config), repr(list(times))))


class LibTuner(Autotuner):
    _dispatch_table = {}
    _strategy_table = {}

    def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=None, post_hook=None,
                 prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, strategy=None):
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=_timer)
        self.do_bench = _timer
        self.__name__ = self.base_fn.__name__
        self.keys = key
        if isinstance(strategy, str):
            strategy = LibTuner._strategy_table[strategy]
        if not isinstance(strategy, (list, tuple)):
            strategy = [strategy] * len(self.keys)
        self.strategy = [LibTuner._strategy_table[s] if isinstance(s, str) else s for s in strategy]
        configs_hash = hashlib.md5(",".join(map(str, self.configs)).encode()).hexdigest()
        self.config_table_name = f"{self.__name__}_{configs_hash}"
        self.benchmark_table_name = f"{self.__name__}_benchmark"
        self.cache = ConfigCache(self.config_table_name)

    def get_key(self, args):
        key = tuple(starmap(lambda i, name: self.strategy[i](args[name]), enumerate(self.keys)))
        key += tuple(str(arg.dtype) for arg in args.values() if hasattr(arg, "dtype"))
        return key

    @staticmethod
    def policy(self, fn, configs, args, kwargs):
        raise NotImplementedError

    @classmethod
    def register(cls, name):
        def decorator(subclass):
            cls._dispatch_table[name] = subclass
            return subclass

        return decorator

    @staticmethod
    def register_policy(name):
        def decorator(policy_impl):
            @LibTuner.register(name)
            class AnonymousLibTunerImpl(LibTuner):
                def policy(self, fn, configs, args, kwargs):
                    return policy_impl(fn, configs, args, kwargs)

            return AnonymousLibTunerImpl

        return decorator

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        if len(self.configs) > 1:
            all_args = {**self.nargs, **kwargs}
            key = self.get_key({k: v for k, v in all_args.items() if k in self.arg_names})
            if key not in self.cache:
                cache = BenchmarkCache(self.benchmark_table_name, key)
                pruned_configs = self.prune_configs(kwargs)
                bench_start = time.time()

                def bench(config):
                    ret = cache.get(config)
                    if ret is None:
                        ret = self._bench(*args, config=config, **kwargs)
                        cache[config] = tuple(ret)
                    return list(ret)

                best_config, timings = self.policy(bench, pruned_configs, args, kwargs)
                self.bench_time = time.time() - bench_start
                self.cache[key] = best_config
                self.pre_hook({**self.nargs, **kwargs, **self.cache[key].all_kwargs()}, reset_only=True)
                self.configs_timings = timings
            config = self.cache[key]
            if config.pre_hook is None:
                cached_kwargs = config.all_kwargs()
                for original_config in self.configs:
                    if original_config.all_kwargs() == cached_kwargs:
                        config = original_config
                        break
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        ret = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return ret


LibTuner._strategy_table[None] = LibTuner._strategy_table["default"] = lambda key: key
LibTuner._strategy_table["align32"] = lambda key: math.ceil(key / 32) * 32


@LibTuner.register_policy("default")
def default_policy(bench_fn, configs, args, kwargs):
    timings = {config: bench_fn(config) for config in configs}
    return min(timings, key=timings.get), timings


def libtuner(configs, key, prune_configs_by=None, strategy="default", policy="default"):
    cls = LibTuner._dispatch_table[policy] if isinstance(policy, str) else policy

    def decorator(fn):
        return cls(fn, fn.arg_names, configs, key, None, None, prune_configs_by=prune_configs_by, strategy=strategy)

    return decorator


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 4), (16, 1), (32, 2), (128, 4))]


@libtuner(configs=CONFIGS, key=["n"], strategy=["align32"])
@triton.jit
def triple_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)


def triple(x):
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    triple_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out
