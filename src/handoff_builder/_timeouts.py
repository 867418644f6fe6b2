"""Awaiting with a time limit, without losing a cancellation, telling our limit from others."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["DeadlinePassedError", "within"]


class DeadlinePassedError(TimeoutError):
    """The limit given to :func:`within` passed (not a timeout raised by the call itself)."""


async def within(seconds: float | None, call: Awaitable[T]) -> T:
    """``call``, cancelled after ``seconds`` (:class:`DeadlinePassedError`); ``None``: no limit.

    A ``TimeoutError`` the call raises by itself passes through as it is. On Python 3.11+ this is
    ``asyncio.timeout``, which runs ``call`` in the current task and knows whether it fired.
    Before 3.11 it is ``asyncio.wait_for`` (which can swallow a cancellation that arrives just as
    ``call`` finishes, CPython gh-86296, and raises its own ``asyncio.TimeoutError``).
    """
    if seconds is None:
        return await call
    if sys.version_info >= (3, 11):
        limit = asyncio.timeout(seconds)
        try:
            async with limit:
                return await call
        except TimeoutError as error:
            if limit.expired():
                raise DeadlinePassedError(f"no result within {seconds:g} s") from error
            raise
    started = time.monotonic()  # pragma: no cover - Python 3.10
    try:  # pragma: no cover
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError as error:  # pragma: no cover
        if time.monotonic() - started >= seconds * 0.99:
            raise DeadlinePassedError(f"no result within {seconds:g} s") from error
        raise TimeoutError(str(error)) from error
