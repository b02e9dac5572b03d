"""How one evidence file is kept current in bytes that grow with its size only: the whole
document is rewritten (atomically) while it is small, and at the end; in between, new entries
are appended to its journal (``core.jsonfile.Journal``, ``<file>.jsonl.gz``), which the report
reads with the file.  Each whole write gives the file a new ``journal_id``; the journal's first
line names the id of the file it continues, so a journal left over from before the last whole
write is never read into it."""

from __future__ import annotations

import logging
import os
import secrets

from ..core import jsonfile
from ..core.schema import JOURNAL_FORMAT, journal_of

logger = logging.getLogger("autotune_guard")

SMALL_BYTES = 16 * 1024  # below this a file is rewritten whole (a reader of the file alone sees it all)


class EvidenceFile:
    """One file's state: the log it holds (by identity), the size of its last whole write, its
    journal (opened at the first append after a whole write)."""

    def __init__(self):
        self.log_id = None
        self.size = 0
        self.token = ""
        self.target = ""
        self.journal: jsonfile.Journal | None = None
        self.journal_refused = False  # its journal's name is held by another: whole writes only

    def wants_whole(self, log_id) -> bool:
        return log_id != self.log_id or self.size < SMALL_BYTES or self.journal_refused

    def new_token(self) -> str:
        return secrets.token_hex(8)

    def written_whole(self, log_id, target: str, size: int, token: str) -> None:
        """After a whole write (renamed into place): the old journal goes, its entries are in the file."""
        self.log_id, self.target, self.size, self.token = log_id, target, size, token
        if self.journal is not None:
            self.journal.close(remove=True)
            self.journal = None
        elif os.path.lexists(journal_of(target)):
            _remove_stale(journal_of(target))

    def nothing_yet(self, log_id) -> None:
        """A record file with no entries yet: not written; its first entries write it whole."""
        self.log_id, self.target, self.size = log_id, "", SMALL_BYTES

    def append(self, lines: list) -> bool:
        """Add ``lines`` to the journal; False when there can be none (then write the file whole)."""
        if not lines:
            return True
        if not self.target:
            return False
        if self.journal is None:
            try:
                self.journal = jsonfile.Journal(journal_of(self.target), {
                    "format": JOURNAL_FORMAT, "of": os.path.basename(self.target), "journal_id": self.token},
                    own_only=True)
            except OSError as exc:
                logger.debug("no journal for %s (%s): the file is rewritten whole", self.target, exc)
                self.journal_refused = True
                return False
        self.journal.append(lines)
        return True

    def forget(self) -> None:
        """In a forked child: the parent's journal is the parent's (closed here, left on disk)."""
        if self.journal is not None:
            try:
                os.close(self.journal.fd)
            except OSError:
                pass
        self.journal = None


def _remove_stale(path: str) -> None:
    """A journal of this process's name from before its last whole write (a previous policy)."""
    try:
        info = os.lstat(path)
        if info.st_uid == os.geteuid() and not os.path.islink(path):
            os.unlink(path)
    except OSError:
        pass
