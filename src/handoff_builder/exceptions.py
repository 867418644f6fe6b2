"""Errors raised by handoff_builder.

Every error derives from :class:`HandoffBuilderError`; leaves also subclass the built-in that fits,
so ``except ValueError`` keeps working for configuration mistakes::

    HandoffBuilderError(Exception)
    ├── HandoffConfigurationError(HandoffBuilderError, ValueError)   build() found problems
    ├── SchemaVersionError(HandoffBuilderError, ValueError)          state from a newer version
    └── ScriptExhaustedError(HandoffBuilderError, RuntimeError)      a scripted model ran out

Errors that happen inside an agent's run (an empty goal, a handoff to an agent that is not granted)
are never raised: they are returned to the calling agent as tool errors, and reported as events.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "HandoffBuilderError",
    "HandoffConfigurationError",
    "SchemaVersionError",
    "ScriptExhaustedError",
]


class HandoffBuilderError(Exception):
    """Base class of every error raised by handoff_builder."""


class HandoffConfigurationError(HandoffBuilderError, ValueError):
    """The workflow configuration is invalid; ``problems`` lists every problem found.

    ``build()`` checks the whole configuration and reports all problems at once, each naming the
    agents involved and saying how to fix it.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        if len(self.problems) == 1:
            message = f"Invalid handoff workflow: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {problem}" for problem in self.problems)
            message = f"Invalid handoff workflow ({len(self.problems)} problems):\n{lines}"
        super().__init__(message)


class SchemaVersionError(HandoffBuilderError, ValueError):
    """Persisted state was written by a newer handoff_builder; it is refused, never overwritten."""

    def __init__(self, where: str, found: int, supported: int) -> None:
        self.where = where
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where} has schema version {found}; this version of handoff_builder reads up to "
            f"{supported}. Upgrade handoff_builder to read it."
        )


class ScriptExhaustedError(HandoffBuilderError, RuntimeError):
    """A :class:`~handoff_builder.testing.ScriptedChatClient` was called after its last step."""

    def __init__(self, client_name: str, calls: int) -> None:
        self.client_name = client_name
        self.calls = calls
        super().__init__(
            f"Scripted chat client {client_name!r} has no step left for model call #{calls}: "
            "add a step to its script, or check why the workflow called this agent again."
        )
