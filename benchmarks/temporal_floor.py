"""A workflow of no-op activities: what Temporal itself costs, for ``bench_temporal.py``."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench_noop")
async def noop(value: int) -> int:
    return value


@workflow.defn(name="BenchFloor", sandboxed=False)
class Floor:
    """Runs ``activities`` no-op activities one after the other."""

    @workflow.run
    async def run(self, activities: int) -> int:
        for number in range(activities):
            await workflow.execute_activity(
                noop, number, start_to_close_timeout=timedelta(seconds=10)
            )
        return activities
