"""Whether a sink's or a source's serializer getter returns a usable serializer."""

from __future__ import annotations

from sinkv2._text import describe

__all__ = ["serializer_problem"]


def serializer_problem(owner: object, getter: str, example: str) -> str | None:
    """What is wrong with the serializer ``owner.<getter>()`` returns, or ``None``.

    The getter must return a `SimpleVersionedSerializer` (``get_version``,
    ``serialize``, ``deserialize``) whose version is an int in ``[0, 2**31)``;
    ``example`` is what the message suggests returning instead.
    """
    try:
        serializer = getattr(owner, getter)()
    except Exception as error:  # noqa: BLE001  # reported as a definition error
        return f"{getter}() raised {type(error).__name__}: {error}"
    missing = [
        method
        for method in ("get_version", "serialize", "deserialize")
        if not callable(getattr(serializer, method, None))
    ]
    if missing:
        return (
            f"{getter}() returned {describe(serializer)}, which is not a "
            f"SimpleVersionedSerializer (no {', '.join(m + '()' for m in missing)}); "
            f"return one, e.g. {example}"
        )
    try:
        version = serializer.get_version()
    except Exception as error:  # noqa: BLE001  # reported as a definition error
        return f"{getter}().get_version() raised {type(error).__name__}: {error}"
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 2**31:
        return (
            f"{getter}().get_version() must return an int in [0, 2**31) (got {describe(version)})"
        )
    return None
