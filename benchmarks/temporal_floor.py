"""A workflow of no-op activities: what Temporal itself costs, for ``bench_temporal.py``.

Each activity takes ``size`` bytes and returns ``result`` bytes, the sizes of an agent call's
input and result, so the raw hop carries what a hop of the desk carries.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench_noop")
async def noop(payload: str, result: int) -> str:
    del payload
    return "r" * result


@workflow.defn(name="BenchFloor", sandboxed=False)
class Floor:
    """Runs ``activities`` no-op activities one after the other, each given ``size`` bytes and
    returning ``result`` bytes."""

    @workflow.run
    async def run(self, activities: int, size: int, result: int) -> int:
        for _ in range(activities):
            await workflow.execute_activity(
                noop,
                args=["p" * size, result],
                start_to_close_timeout=timedelta(seconds=10),
            )
        return activities
