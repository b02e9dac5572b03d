"""A one-shot ``sys.meta_path`` finder: when ``triton`` or ``torch`` starts being imported, it calls
back (the guard then registers its post-import hooks). It finds nothing itself. Standard library
only: the ``.pth`` line loads it in every interpreter where an ``AUTOTUNE_*`` variable is set."""

import sys


class ImportWatch:
    def __init__(self, callback):
        self.callback = callback
        self.fired = False

    def find_spec(self, name, path=None, target=None):
        if not self.fired and (name == "triton" or name == "torch"):
            self.fired = True
            try:
                self.callback()
            except BaseException:
                self.fired = False  # a retried import fails the same way, never runs unguarded
                raise
        return None


def watch(callback) -> None:
    """Call ``callback`` when Triton or torch starts being imported (once; idempotent)."""
    if not any(isinstance(f, ImportWatch) and not f.fired for f in sys.meta_path):
        sys.meta_path.insert(0, ImportWatch(callback))


def unwatch() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, ImportWatch)]
