r"""Valid Unicode text: lone surrogates found, and replaced with U+FFFD.

JSON may spell a lone UTF-16 surrogate (``"\ud800"``), and Python decodes it into a string that
has no UTF-8 form: every encoder that writes UTF-8 fails on it (AG-UI's event encoder, DevUI's
responses, httpx sending it to a model as JSON). What a served conversation takes in and hands
on is made valid here, in one way: each lone surrogate becomes U+FFFD, the replacement character.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

__all__ = ["REPLACEMENT_CHARACTER", "surrogate_at", "valid_text", "valid_unicode"]

REPLACEMENT_CHARACTER = "\ufffd"

_T = TypeVar("_T")


def surrogate_at(text: str) -> int | None:
    """Where ``text`` has its first surrogate code point (no UTF-8 form); ``None``: nowhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD; ``text`` itself when it has none.

    A surrogate pair spelled as two code points becomes the one character it encodes.
    """
    if surrogate_at(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def valid_unicode(value: _T) -> _T:
    """``value`` (text, or JSON-like lists and dicts of it) with valid text everywhere.

    What needed no change is returned as it is (the same object), so a check costs no copy.
    """
    if isinstance(value, str):
        return cast(_T, valid_text(value))
    if isinstance(value, dict):
        items = list(cast(dict[Any, Any], value).items())
        cleaned = [(valid_unicode(key), valid_unicode(item)) for key, item in items]
        if all(a is c and b is d for (a, b), (c, d) in zip(items, cleaned, strict=True)):
            return cast(_T, value)
        return cast(_T, dict(cleaned))
    if isinstance(value, list):
        elements = cast(list[Any], value)
        cleaned_elements = [valid_unicode(element) for element in elements]
        if all(a is b for a, b in zip(elements, cleaned_elements, strict=True)):
            return cast(_T, value)
        return cast(_T, cleaned_elements)
    return value
