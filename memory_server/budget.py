"""The result budget: how many tokens a result may cost the agent, and cutting results down to it.

Tokens are estimated from characters, the way clients and the issue count them: four characters a token, and
every character outside ASCII a token of its own (scripts such as Chinese spend about one token a character).
Structured content is measured as `json.dumps` writes it by default (ASCII-escaped, with spaces), the largest
form a client is likely to count. Results are filled to `FILL` of the budget, a margin for tokenizers that
split JSON finer than four characters a token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

DEFAULT_MAX_RESULT_TOKENS = 20_000
FILL = 0.9  # share of the budget a result is filled to
ECHO_SHARE = 0.25  # a write's echo repeats what the caller just sent: a quarter of the budget is plenty
CUT_MARK = "… [cut]"

T = TypeVar("T")


def text_tokens(text: str) -> float:
    if text.isascii():
        return len(text) / 4
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars / 4 + (len(text) - ascii_chars)


def json_chars(value: Any) -> int:
    """Characters of `value` as `json.dumps` writes it by default."""
    return len(json.dumps(value))


def json_tokens(value: Any) -> float:
    return json_chars(value) / 4


@dataclass(frozen=True)
class Budget:
    """At most `max_tokens` per result, in the text and in the structured content each; 0 means unlimited."""

    max_tokens: int = DEFAULT_MAX_RESULT_TOKENS

    @property
    def unlimited(self) -> bool:
        return self.max_tokens <= 0

    @property
    def fill(self) -> float:
        """The tokens a result is filled to (infinite when unlimited)."""
        return float("inf") if self.unlimited else self.max_tokens * FILL

    def share(self, part: float) -> Budget:
        return self if self.unlimited else Budget(max(1, int(self.max_tokens * part)))

    def tokens(self, structured: dict[str, Any] | None, text: str) -> float:
        """What a result costs: the larger of its text and its structured content (0 when unlimited: not counted)."""
        if self.unlimited:
            return 0.0
        return max(text_tokens(text), json_tokens(structured) if structured is not None else 0.0)

    def fits(self, structured: dict[str, Any] | None, text: str) -> bool:
        return self.tokens(structured, text) <= self.fill


def item_tokens(item: Any) -> float:
    """Tokens one list item adds to a result: the larger of its compact text and its structured form."""
    compact = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    return max(text_tokens(compact), len(json.dumps(item)) / 4) + 0.5


def prefix_fitting(sizes: Sequence[float] | Callable[[int], float], count: int, room: float) -> int:
    """How many of the first `count` items fit in `room` tokens, their sizes given as a list or computed on
    demand (so a long list is measured only as far as it fits)."""
    size = sizes.__getitem__ if isinstance(sizes, Sequence) else sizes
    used = 0.0
    for index in range(count):
        used += size(index)
        if used > room:
            return index
    return count


def largest_fitting(
    budget: Budget, build: Callable[[int], tuple[dict[str, Any], str]], guess: int, most: int
) -> tuple[int, dict[str, Any], str]:
    """The largest n <= `guess` whose result `build(n)` fits the budget, with that result. `guess` comes from
    per-item estimates that err on the large side, so this only shrinks; it stops at 1 when `most` >= 1, even
    if one item alone is too big (`build` cuts it then)."""
    n = max(min(guess, most), 1 if most else 0)
    structured, text = build(n)
    while n > 1 and not budget.fits(structured, text):
        n = max(1, min(n - 1, int(n * budget.fill / budget.tokens(structured, text) * 0.95)))
        structured, text = build(n)
    return n, structured, text


def cut_item(item: dict[str, Any], room: float) -> tuple[dict[str, Any], str | None]:
    """`item` cut to about `room` tokens: its list of texts shortened, then over-long strings clipped; with a
    note saying what was left out (None when nothing was)."""
    if item_tokens(item) <= room:
        return item, None
    cut = dict(item)
    notes = []
    for key, value in item.items():
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            kept = prefix_fitting(lambda i, v=value: item_tokens(v[i]), len(value), room * 0.9)
            cut[key] = value[:kept]
            if kept < len(value):
                notes.append(f"{kept} of {len(value)} {key} shown")
    if item_tokens(cut) > room:  # single strings too long for a result: clip them
        limit = max(40, int(room * 4 * 0.8 / max(1, _strings_in(cut))))
        cut = _clip(cut, limit)
        notes.append(f"texts longer than {limit} characters clipped")
    return cut, "; ".join(notes)


def _strings_in(value: Any) -> int:
    if isinstance(value, str):
        return 1
    if isinstance(value, dict):
        return sum(_strings_in(v) for v in value.values())
    if isinstance(value, list):
        return sum(_strings_in(v) for v in value)
    return 0


def _clip(value: T, limit: int) -> T:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + CUT_MARK  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [_clip(v, limit) for v in value]  # type: ignore[return-value]
    return value
