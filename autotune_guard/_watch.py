"""A one-shot ``sys.meta_path`` finder: when ``triton`` or ``torch`` starts being imported, it calls
back (the guard then registers its post-import hooks). It finds nothing itself. Standard library
only: the ``.pth`` line loads it in every interpreter where an ``AUTOTUNE_*`` variable is set."""

import sys

# The attribute of the finder the inactive .pth line puts on sys.meta_path (a SimpleNamespace:
# making a class at every interpreter start would cost several times more).
LATE_FINDER = "autotune_guard_late"


class ImportWatch:
    def __init__(self, callback):
        self.callback = callback
        self.fired = False

    def find_spec(self, name, path=None, target=None):
        if not self.fired and (name == "triton" or name == "torch") and importing():
            self.fired = True
            try:
                self.callback()
            except BaseException:
                self.fired = False  # a retried import fails the same way, never runs unguarded
                raise
        return None


def importing() -> bool:
    """Whether the finder was asked by a real import, not by a lookup such as
    ``importlib.util.find_spec("triton")`` (transformers and accelerate look Triton up long before
    the program imports it, perhaps before it sets ``AUTOTUNE_*``). An import asks the finders from
    ``importlib._bootstrap._find_spec`` called by ``_find_and_load_unlocked``; a lookup calls
    ``_find_spec`` from elsewhere. A stack that shows neither counts as an import."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            break
        code = frame.f_code
        if code.co_name == "_find_spec" and "importlib._bootstrap" in code.co_filename:
            caller = frame.f_back
            return caller is not None and caller.f_code.co_name == "_find_and_load_unlocked"
        frame = frame.f_back
    return True


def watch(callback) -> None:
    """Call ``callback`` when Triton or torch starts being imported (once; idempotent)."""
    if not any(isinstance(f, ImportWatch) and not f.fired for f in sys.meta_path):
        sys.meta_path.insert(0, ImportWatch(callback))


def unwatch() -> None:
    """Drop the watchers (and the inactive .pth's finder): called once the guard is armed."""
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not isinstance(f, ImportWatch) and not getattr(f, LATE_FINDER, False)]
