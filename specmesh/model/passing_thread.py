"""Run one-off torch work (model loading, warm-up, profiling) in a thread that ends with it.

libgomp, torch's CPU thread pool, keeps a team of worker threads for every thread that ever ran
a parallel region, for as long as that thread lives; once the teams' threads outnumber the cores
it stops spinning between parallel regions and puts workers to sleep after each one. A service
whose engine thread runs the forwards must therefore not leave a second team behind in a pooled
thread (`asyncio.to_thread`): measured on a 2-core VM, the forward then used 1.4 of its 2 cores
and took ~20% longer. A thread that exits frees its team.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def run_in_passing_thread(fn: Callable[..., T], *args) -> T:
    """fn(*args) in a new thread; returns (or raises) once that thread has exited."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as error:  # handed to the awaiting coroutine
            outcome["error"] = error

    thread = threading.Thread(target=target, name=f"passing-{getattr(fn, '__name__', 'work')}", daemon=True)
    thread.start()
    await asyncio.to_thread(thread.join)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
