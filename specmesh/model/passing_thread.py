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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


async def run_in_passing_thread(fn: Callable[..., T], *args) -> T:
    """fn(*args) in a new thread; returns (or raises) once that thread has exited."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="passing") as executor:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
