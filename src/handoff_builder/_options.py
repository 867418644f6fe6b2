"""Keyword options over a settings value, for the constructors that take ``settings=``.

A constructor of a host or a store takes how it works as one frozen dataclass (``settings=``) or
as that dataclass's fields given as keywords (typed by a ``TypedDict`` through ``Unpack``);
:func:`settings_with` puts the two together, the same way for each of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["settings_with"]

S = TypeVar("S", bound="DataclassInstance")


def settings_with(
    kind: type[S], settings: S | None, options: Mapping[str, object], owner: str
) -> S:
    """``settings`` (default: ``kind()``) with ``options`` in place of its fields, checked.

    ``owner`` names the constructor that took the options, for the message of an unknown one.

    Raises:
        TypeError: an option that is not a field of ``kind``.
        ValueError: a field out of range (``kind``'s own checks).
    """
    names = sorted(field.name for field in fields(kind))
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(
            f"{owner}() got an unexpected keyword argument {unknown[0]!r}; its options are the "
            f"fields of {kind.__name__}: {', '.join(names)}."
        )
    base = kind() if settings is None else settings
    return replace(base, **options) if options else base
