"""Awaiting with a time limit, without losing a cancellation."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["within"]


async def within(seconds: float | None, call: Awaitable[T]) -> T:
    """``call``, cancelled after ``seconds`` (then ``TimeoutError``); ``None``: no limit.

    On Python 3.11+ this is ``asyncio.timeout``, which runs ``call`` in the current task. Before
    3.11 it is ``asyncio.wait_for``, which can swallow a cancellation that arrives just as
    ``call`` finishes (CPython gh-86296).
    """
    if seconds is None:
        return await call
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await call
    return await asyncio.wait_for(call, seconds)  # pragma: no cover - Python 3.10
