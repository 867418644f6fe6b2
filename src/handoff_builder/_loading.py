"""The builder a ``MODULE:ATTRIBUTE`` spec names: what ``chat``, ``graph``, ``worker`` load."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._builder import HandoffWorkflowBuilder

__all__ = ["builder_of", "load_builder", "load_target", "parameters_of"]


def load_target(spec: str) -> object:
    """What ``module:attribute`` names (an attribute path), with the current directory on the path.

    Raises:
        ValueError: the spec is not ``MODULE:ATTRIBUTE``, or the module or attribute is not there.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected MODULE:ATTRIBUTE (e.g. myapp.desk:builder), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: object = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r}: {error}") from error
    except (Exception, SystemExit) as error:  # the module's own code failed, or exited
        raise ValueError(
            f"importing {module_name!r} raised {type(error).__name__}: {error}"
        ) from error
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    return value


def load_builder(spec: str) -> HandoffWorkflowBuilder:
    """The builder ``module:attribute`` names (an attribute path; a function is called)."""
    return builder_of(load_target(spec), spec)


def parameters_of(value: object) -> frozenset[str] | None:
    """The keyword parameters a plain function takes (``None``: not a function; a builder)."""
    from ._builder import HandoffWorkflowBuilder

    if not callable(value) or isinstance(value, HandoffWorkflowBuilder):
        return None
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a callable whose signature cannot be read
        return frozenset()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in signature.parameters.values() if p.kind in kinds)


def builder_of(
    value: object, spec: str, arguments: Mapping[str, object] | None = None
) -> HandoffWorkflowBuilder:
    """``value`` as a builder: itself, or what calling it (a plain function) returns.

    ``arguments`` are keyword arguments for the function (the caller checked that it takes them).
    """
    from ._builder import HandoffWorkflowBuilder

    if callable(value) and not isinstance(value, HandoffWorkflowBuilder):
        try:
            value = value(**(arguments or {}))
        except (Exception, SystemExit) as error:  # reported in one line
            raise ValueError(f"calling {spec} raised {type(error).__name__}: {error}") from error
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: say so plainly, not with a RuntimeWarning
            raise ValueError(f"{spec} is async; name a builder, or a plain function returning one")
    if not isinstance(value, HandoffWorkflowBuilder):
        raise ValueError(
            f"{spec} is an object of type {type(value).__name__}, not a HandoffWorkflowBuilder "
            "(or a function that returns one)"
        )
    return value
