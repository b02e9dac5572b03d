"""The wall clock as the candidates' timer where Triton cannot time: under ``TRITON_INTERPRET=1``
kernels run on the CPU and Triton's default timer asks for a GPU driver (``0 active drivers``), as
it does on a machine without one. A kernel that brings its own ``do_bench`` keeps it.

``wall_clock_timer`` keeps Triton's ``do_bench(kernel_call, quantiles)`` contract (the quantiles
asked, as a list, or one number for one), so that Triton's ``_bench`` takes it on every supported
release. Its timings are tagged (``WallTimings.timer``), so that a measurement says the wall clock
took them; the first one it completes is said once per process.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time

from ...runtime import current

WALL_CLOCK = "wall-clock"  # the timer a measurement names where the wall clock timed it
WARMUP_CALLS = 1  # the interpreter's first call of a config builds what its later calls reuse
MOST_REPEATS = 5  # timings of a candidate, their median its timing ...
LEAST_REPEATS = 3  # ... or this few once they took ENOUGH_S: a slow candidate is not timed for long
ENOUGH_S = 0.25

_found = {}  # "cannot time" -> bool, asked once per process
_lock = threading.Lock()


class WallTimings(list):
    """Milliseconds the wall clock gave for the quantiles asked (Triton's ``[median, p20, p80]``)."""

    timer = WALL_CLOCK


def timer_of(value) -> str | None:
    """The timer that gave ``value`` where it is not the kernel's own or Triton's (``WALL_CLOCK``)."""
    return getattr(value, "timer", None) if isinstance(value, WallTimings) else None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def cannot_time() -> bool:
    """Whether Triton's default timer cannot time here: under the interpreter, or with no GPU driver
    (asked of Triton's driver once; Triton resolves it at a kernel's first launch anyway)."""
    if interpreting():
        return True
    with _lock:
        if "no driver" not in _found:
            _found["no driver"] = _no_driver()
        return _found["no driver"]


def _no_driver() -> bool:
    try:
        from triton.runtime.driver import driver

        getattr(driver.active, "get_benchmarker")  # 3.3's lazy proxy makes the driver on this read
    except RuntimeError:  # "0 active drivers ([]). There should only be one."
        return True
    return False


def wall_clock_timer(kernel_call, quantiles=None, **_options):
    """``kernel_call`` timed by the wall clock after a warm-up: MOST_REPEATS timings (LEAST_REPEATS
    where they took ENOUGH_S); the ``quantiles`` asked of them, in milliseconds, else their median."""
    for _ in range(WARMUP_CALLS):
        kernel_call()
    times, spent = [], 0.0
    while len(times) < MOST_REPEATS and (len(times) < LEAST_REPEATS or spent < ENOUGH_S):
        started = time.perf_counter()
        kernel_call()
        took = time.perf_counter() - started
        times.append(took * 1e3)
        spent += took
    _say_once()
    if quantiles is None:
        return _quantile(sorted(times), 0.5)
    found = WallTimings(_quantile(sorted(times), float(q)) for q in quantiles)
    return found if len(found) > 1 else found[0]


wall_clock_timer._autotune_guard_wall_clock = True  # the guard's: never taken for a kernel's own


def is_wall_clock(timer) -> bool:
    return getattr(timer, "_autotune_guard_wall_clock", False) is True


def _quantile(ordered: list, q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated linearly (as ``torch.quantile``, Triton's)."""
    position = min(max(q, 0.0), 1.0) * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _say_once() -> None:
    where = "under TRITON_INTERPRET=1" if interpreting() else "without a GPU driver"
    current().warn_once("wall-clock timer", (
        f"{where}, candidate configs of kernels without a do_bench of their own are timed with the wall clock: "
        "these timings are wall-clock times of the interpreter on the CPU, not GPU timings (records and tables "
        f"mark them timer: {WALL_CLOCK})"), logging.INFO, scope="process")
