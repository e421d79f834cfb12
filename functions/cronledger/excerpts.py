"""Bounded text: what a target answered or why it failed, cut to what the ledger keeps: at
most so many bytes of UTF-8, never inside a character, marked when cut."""

from __future__ import annotations

RESULT_EXCERPT_BYTES = 64 * 1024
ERROR_MESSAGE_BYTES = 4096
_TRUNCATION_MARK = "…[truncated]"


def truncate_excerpt(text: str | None, limit_bytes: int = RESULT_EXCERPT_BYTES) -> str | None:
    """`text` cut to at most `limit_bytes` of UTF-8 (mark included)."""
    if text is None:
        return None
    encoded = text.encode("utf-8")
    if len(encoded) <= limit_bytes:
        return text
    room = limit_bytes - len(_TRUNCATION_MARK.encode("utf-8"))
    return encoded[:room].decode("utf-8", errors="ignore") + _TRUNCATION_MARK
