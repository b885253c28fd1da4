"""An episode store in a process forked after its threads ran.

A process forked while a loader's fetch threads had run (torch DataLoader workers forked beside a loader that
fetched) has none of them: a fetch they began never ends there, a pool counts threads that are not there, a lock may
stay held. So there every use of that store raises `DaliStreamError`, naming both processes and the fix, instead of
waiting forever, and its close does nothing (what it would end or free is the parent's). A store forked before its
threads ran serves as usual.
"""

from __future__ import annotations

import os
import weakref
from typing import Callable

from ..errors import DaliStreamError


class ForkGuard:
    """Whether its store may serve in this process: `ran()`, asked in a forked child before anything else runs
    there, says whether the store's threads had run (a fetch begun, a thread started) when the process forked."""

    def __init__(self, ran: Callable[[], bool]) -> None:
        self._ran = ran
        self.pid = os.getpid()  # the process the store was made in
        self.forked = False  # in a process forked after the store's threads ran: it cannot serve here
        _GUARDS.add(self)

    def check(self) -> None:
        """Raise where the store cannot serve in this process (`forked`): nothing would ever end a wait here."""
        if self.forked:
            raise DaliStreamError(
                f"this loader was made in process {self.pid} and is used in process {os.getpid()}, forked from it "
                "after the loader had fetched: its fetch threads do not exist in this process, and what they began "
                "would never end. Make the loader in the process that iterates it (or fork before iterating it); "
                "for torch DataLoader workers wrap loader.dataset, which opens a loader of its own in each worker")

    def after_fork(self) -> None:
        self.forked = self.forked or self._ran()


_GUARDS: "weakref.WeakSet[ForkGuard]" = weakref.WeakSet()  # every store's, alive in this process


def _forked() -> None:
    for guard in list(_GUARDS):
        guard.after_fork()


os.register_at_fork(after_in_child=_forked)
