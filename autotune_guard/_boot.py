"""Start-up: run by ``autotune_guard.pth`` when an ``AUTOTUNE_*`` variable is set.

It must cost next to nothing and never raise (an exception in a ``.pth`` line is printed and the
program then runs unguarded; a ``SystemExit`` there kills the interpreter).  So it only puts a
tiny watcher on ``sys.meta_path``; wrapt, python-dotenv and the policy are loaded when Triton or
torch starts being imported, and a bad setting fails that import, loudly.

The ``.pth`` line itself runs in every interpreter, so it is written for the cold cost of
compiling and running it once (scripts/bench_startup.py): one flat ``str.join`` over the
variable names rather than a generator, no keyword arguments, no comment line.
"""

import os
import sys

_armed = False


def main():
    """Entry point of the ``.pth`` line; idempotent (a venv runs every ``.pth`` twice)."""
    global _armed
    if _armed or os.environ.get("AUTOTUNE_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        return
    _armed = True
    if "_AUTOTUNE_GUARD_RUN" not in os.environ:
        # The run id the processes this one starts inherit (torchrun workers, mp.spawn children,
        # subprocesses): evidence files carry it so the report tells runs apart.  Cheap: no import.
        os.environ["_AUTOTUNE_GUARD_RUN"] = f"{os.getpid()}-{id(os):x}-{os.urandom(4).hex()}"
    try:
        arm()
    except Exception as exc:  # never raise from start-up; say so instead
        sys.stderr.write(f"autotune_guard: could not arm the import hook ({exc!r}); Triton runs unguarded\n")


def arm():
    """Register the post-import hooks now if Triton or torch is loaded, else at their import."""
    if "triton" in sys.modules or "torch" in sys.modules:
        register_hooks()
    elif not any(isinstance(f, _ImportWatch) and not f.fired for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportWatch())


class _ImportWatch:
    """A one-shot finder: when ``triton`` or ``torch`` starts being imported, import wrapt and
    register its post-import hooks.  It finds nothing itself."""

    fired = False

    def find_spec(self, name, path=None, target=None):
        if not self.fired and (name == "triton" or name == "torch"):
            self.fired = True
            try:
                register_hooks()
            except BaseException:
                self.fired = False  # a retried import fails the same way, never runs unguarded
                raise
        return None


def register_hooks():
    try:
        import wrapt
    except Exception as exc:
        raise ImportError(f"autotune_guard is active (an AUTOTUNE_* variable is set) but its dependency wrapt cannot "
                          f"be imported ({exc!r}); reinstall autotune-guard, or set AUTOTUNE_DISABLE=1 to run "
                          "unguarded") from exc

    wrapt.register_post_import_hook(_on_autotuner, "triton.runtime.autotuner")
    wrapt.register_post_import_hook(_on_distributed, "torch.distributed")
    wrapt.register_post_import_hook(_on_inductor, "torch._inductor.runtime.triton_heuristics")


def _on_autotuner(module):
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _ImportWatch)]
    from . import api

    try:
        api.on_triton_import(module)
    except BaseException:
        # The failed import is rolled back and wrapt has dropped this hook: watch again, so
        # that retrying ``import triton`` fails the same way instead of running unguarded.
        sys.meta_path.insert(0, _ImportWatch())
        raise


def _on_distributed(module):
    from . import distributed

    distributed.wrap_barriers(module)


def _on_inductor(module):
    from . import inductor

    inductor.patch(module)
