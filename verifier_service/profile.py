"""The warm-up profile: verification forwards timed over a sweep of batch sizes × tree sizes ×
KV lengths, so the goodput controller's cost model (specmesh/goodput.py) starts from this
verifier's own step times instead of a guess. Published in the registry; the orchestrator then
refits it online from the steps it sees."""

from __future__ import annotations

import time

from specmesh.goodput import StepShape
from specmesh.model.runner import ForwardItem

BATCH_SIZES = (1, 2, 4, 8)
ROWS_PER_SEQUENCE = (1, 5, 16, 32)  # the root + tree nodes (budgets 0, 4, 15, 31 of the ladder)
KV_LENGTHS = (32, 384)
REPEATS = 2  # the fastest of these counts (the first call of a shape pays allocations)


def profile_steps(runner) -> tuple[list[StepShape], list[float]]:
    """(shapes, seconds) of verification-like forwards, in free KV slots it frees again."""
    shapes, seconds = [], []
    for kv in KV_LENGTHS:
        slots = _filled_slots(runner, min(max(BATCH_SIZES), runner.free_slots), kv)
        try:
            for batch in (b for b in BATCH_SIZES if b <= len(slots)):
                for rows in ROWS_PER_SEQUENCE:
                    shapes.append(StepShape(batch, batch * rows, batch * kv, served=0))
                    seconds.append(_time_forward(runner, slots[:batch], rows))
        finally:
            for slot in slots:
                runner.release_slot(slot)
    return shapes, seconds


def _filled_slots(runner, count: int, kv: int) -> list[int]:
    slots = [runner.allocate_slot() for _ in range(count)]
    for slot in slots:
        runner.forward([ForwardItem(slot, [1 + i % 7 for i in range(kv)], logits="none")])
        runner.commit(slot, range(kv))
    return slots


def _time_forward(runner, slots: list[int], rows: int) -> float:
    """A chain of `rows` tokens per slot with logits for every row, like a verification; not
    committed, so the KV lengths stay as they are."""
    items = [ForwardItem(slot, [1 + i % 7 for i in range(rows)]) for slot in slots]  # ids any vocabulary has
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        runner.forward(items)
        best = min(best, time.perf_counter() - started)
    return best
