"""Coalescing of step events in a verifier session (verifier_service/session.py): steps wait
for their stream interval, then go as one event with their tokens and stats in order."""

from specmesh.sampling import SamplingParams
from specmesh.stats import StepStats
from verifier_service.session import Session, SessionSpec


def session(interval_s: float) -> Session:
    spec = SessionSpec("r", [1, 2, 3], [], 64, SamplingParams(), "recycling", "", 4, 1, interval_s)
    return Session(spec, emit=lambda event: None)


def stats(accepted: int) -> StepStats:
    return StepStats(4, accepted, 1, 0.001, 0.02, 4)


def test_steps_wait_for_the_interval_then_go_together_in_order():
    s = session(0.1)
    s.hold([7], None, now=0.0)  # the prefill's token: the loop sends it at once
    first = s.take_event(kv_length=3)
    assert (first.index, first.token_ids, first.steps, first.kv_length) == (0, [7], (), 3)
    s.hold([8, 9], stats(1), now=1.00)
    assert not s.due(1.05)
    s.hold([10], stats(0), now=1.06)
    assert not s.due(1.09) and s.due(1.10)  # timed from the oldest held step
    event = s.take_event(kv_length=6)
    assert (event.index, event.token_ids, event.kv_length) == (1, [8, 9, 10], 6)
    assert [step.accepted for step in event.steps] == [1, 0]
    assert not s.due(5.0)  # nothing held
    s.hold([11], stats(0), now=5.0)
    assert s.take_event(kv_length=7).index == 2


def test_without_an_interval_every_step_is_due_at_once():
    s = session(0.0)
    s.hold([8, 9], stats(1), now=1.0)
    assert s.due(1.0)
