"""The budget ledgers of a process: dollars spent per endpoint, which only ever go up."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from lmclient.spec import api_url


@dataclass
class BudgetLedger:
    """Dollars spent by every client of this process on one endpoint; only ``charge`` moves it, up.
    """

    dollars: float = 0.0
    warned: bool = False

    def charge(self, dollars: float) -> None:
        if not (0.0 <= dollars < math.inf):
            raise ValueError(f"a charge must be a finite, non-negative sum, got {dollars!r}")
        with _LEDGERS_LOCK:
            self.dollars += dollars


_LEDGERS: dict[str, BudgetLedger] = {}
_LEDGERS_LOCK = threading.Lock()


def ledger_for(base_url: str | None) -> BudgetLedger:
    """The process-wide ledger of ``base_url``: a run's clients draw on one budget."""
    key = api_url(base_url)
    with _LEDGERS_LOCK:
        return _LEDGERS.setdefault(key, BudgetLedger())
