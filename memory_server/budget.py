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
MIN_RESULT_TOKENS = 1_000  # a smaller budget cannot hold what a result needs around its content
FILL = 0.9  # share of the budget a result is filled to
ECHO_SHARE = 0.25  # a write's echo repeats what the caller just sent: a quarter of the budget is plenty
SKELETON_RESERVE = 150  # tokens for what is added after a page is made: the header line, the context object
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

    def less(self, tokens: float) -> Budget:
        """This budget with `tokens` already spent on what a result adds around the part being fitted."""
        return self if self.unlimited else Budget(max(1, int(self.max_tokens - tokens)))

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
    """`item` cut to about `room` tokens: its lists of texts fitted (see `fit_texts`), then over-long single
    strings clipped; with a note saying what was left out (None when nothing was)."""
    if item_tokens(item) <= room:
        return item, None
    cut = dict(item)
    notes = []
    lists = [k for k, v in item.items() if isinstance(v, list) and v and all(isinstance(x, str) for x in v)]
    rest = {k: v for k, v in item.items() if k not in lists}
    for key in lists:
        fitted = fit_texts(item[key], (room - item_tokens(rest)) / len(lists))
        cut[key] = fitted.texts
        notes.append(fitted.describe(key))
    if item_tokens(cut) > room:  # single strings too long for a result: clip them
        limit = max(40, int(room * 4 * 0.8 / max(1, _strings_in(cut))))
        cut = _clip(cut, limit)
        notes.append(f"texts longer than {limit} characters clipped")
    return cut, "; ".join(filter(None, notes)) or None


@dataclass(frozen=True)
class Fitted:
    """Texts fitted into a room: those shown (in the order asked), where each came from, how many were shortened."""

    texts: list[str]
    indexes: list[int]  # of each shown text in the list given
    total: int
    clipped: int

    def describe(self, what: str) -> str:
        """E.g. `3 of 5,000 observations shown, 1 shortened`; empty when all were shown whole."""
        parts = []
        if len(self.texts) < self.total:
            parts.append(f"{len(self.texts)} of {self.total} {what} shown")
        if self.clipped:
            parts.append(f"{self.clipped} shortened" if parts else f"{what}: {self.clipped} shortened")
        return ", ".join(parts)


def fit_texts(texts: Sequence[str], room: float, order: Sequence[int] | None = None) -> Fitted:
    """The texts (taken in `order`, default as given) fitted into `room` tokens, leaving out as little as
    possible: every text shorter than a cap is kept whole and the longer ones are clipped to the cap, the cap
    as high as the room allows. When even a cap of MIN_TEXT_TOKENS cannot fit them all, the first ones (in
    `order`) are kept whole, but none longer than a quarter of the room. So one pasted document never hides the
    short facts beside it."""
    order = list(range(len(texts))) if order is None else list(order)
    costs = [item_tokens(texts[i]) for i in order]
    if sum(costs) <= room:
        return Fitted([texts[i] for i in order], order, len(texts), 0)
    cap = _cap(costs, room)
    if cap < MIN_TEXT_TOKENS:
        cap = max(room / 4, MIN_TEXT_TOKENS)
    shown: list[str] = []
    indexes: list[int] = []
    used = 0.0
    for index, cost in zip(order, costs, strict=True):
        text = texts[index] if cost <= cap else clip(texts[index], cap)
        used += min(cost, cap)
        if used > room:
            break
        shown.append(text)
        indexes.append(index)
    clipped = sum(1 for text, index in zip(shown, indexes, strict=True) if text is not texts[index])
    return Fitted(shown, indexes, len(texts), clipped)


def clip(text: str, tokens: float) -> str:
    """`text` shortened to about `tokens` tokens, ending with a mark that gives its whole length."""
    mark = f"… [cut: {len(text):,} characters in all]"
    room = max(tokens - item_tokens(mark), 4)
    keep = min(len(text), int(room * 4))
    while keep > 1 and item_tokens(text[:keep]) > room:  # texts outside ASCII cost more per character
        keep = max(1, min(keep - 1, int(keep * room / item_tokens(text[:keep]) * 0.95)))
    return text[:keep] + mark


def clip_long(value: T, tokens: float) -> T:
    """`value` with every string that costs more than `tokens` clipped to that; `value` itself when none does."""
    if isinstance(value, str):
        return clip(value, tokens) if item_tokens(value) > tokens else value  # type: ignore[return-value]
    if isinstance(value, dict):
        clipped = {k: clip_long(v, tokens) for k, v in value.items()}
        return value if all(clipped[k] is v for k, v in value.items()) else clipped  # type: ignore[return-value]
    if isinstance(value, list):
        items = [clip_long(v, tokens) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items  # type: ignore[return-value]
    return value


MIN_TEXT_TOKENS = 40  # a text is never clipped shorter than this (about 160 characters): enough to tell what it says


def _cap(costs: list[float], room: float) -> float:
    """The largest cap such that the costs, each limited to it, add up to at most `room` (water-filling)."""
    left = room
    ordered = sorted(costs)
    for position, cost in enumerate(ordered):
        if cost * (len(ordered) - position) > left:
            return left / (len(ordered) - position)
        left -= cost
    return float("inf")


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
