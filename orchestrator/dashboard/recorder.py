"""The orchestrator's hook into the dashboard: every request that ends becomes an entry in the
dashboard's history (history.py). A no-op until the dashboard's routes are set up (api.py), so
an orchestrator driven without its HTTP app (tests) records nothing.

Glossary: method: the drafter method a request ran with, "none" when it had no drafter.
"""

from __future__ import annotations

import time

from orchestrator.dashboard.history import History, RequestEntry, entry_from_stats

_history: History | None = None


def attach(history: History) -> None:
    global _history
    _history = history


def entry_of(driver, status: str, reason: str = "") -> RequestEntry:
    """A running or ended request's entry from its driver (driver.py: RequestDriver)."""
    method = driver.method if driver.drafter else "none"
    return entry_from_stats(driver.request.request_id, status, reason, method, driver.stats(), time.time())


def request_ended(driver, status: str, reason: str) -> None:
    if _history is not None:
        _history.add(entry_of(driver, status, reason))
