"""run_in_passing_thread: one-off torch work runs in a thread that is gone when the call returns,
so it leaves no OpenMP team behind beside the verifier's engine thread."""

import asyncio
import threading

import pytest

from specmesh.model.passing_thread import run_in_passing_thread


def test_the_work_runs_in_its_own_thread_which_has_exited_on_return():
    seen = {}

    def work(x):
        seen["thread"] = threading.current_thread()
        return x * 2

    assert asyncio.run(run_in_passing_thread(work, 21)) == 42
    assert seen["thread"] is not threading.main_thread()
    assert not seen["thread"].is_alive()


def test_an_error_reaches_the_caller():
    def fail():
        raise ValueError("no model here")

    with pytest.raises(ValueError, match="no model here"):
        asyncio.run(run_in_passing_thread(fail))
