"""Fitting texts into the budget: nothing short is hidden behind one long text, clipped texts say how long they were."""

from __future__ import annotations

from memory_server.budget import Budget, clip, clip_long, cut_item, fit_texts, item_tokens


def test_one_long_text_is_clipped_and_the_short_ones_beside_it_kept_whole():
    texts = ["x" * 300_000, "short note about espresso", "another fact"]
    fitted = fit_texts(texts, 2_000)
    assert fitted.texts[1:] == texts[1:] and fitted.indexes == [0, 1, 2]
    assert fitted.texts[0].startswith("x" * 1_000) and fitted.texts[0].endswith("… [cut: 300,000 characters in all]")
    assert sum(item_tokens(t) for t in fitted.texts) <= 2_000
    assert (fitted.clipped, fitted.describe("observations")) == (1, "observations: 1 shortened")


def test_texts_come_in_the_order_asked_and_the_first_ones_win_when_not_all_fit():
    texts = [f"fact {i} " + "y" * 200 for i in range(2_000)]
    fitted = fit_texts(texts, 3_000, order=[1_500, 7, *range(2_000)][:2_000])
    assert fitted.indexes[:2] == [1_500, 7] and fitted.texts[0] == texts[1_500]
    assert 10 < len(fitted.texts) < 2_000 and fitted.clipped == 0  # whole texts, as many as fit
    assert sum(item_tokens(t) for t in fitted.texts) <= 3_000
    assert fitted.describe("observations") == f"{len(fitted.texts)} of 2000 observations shown"
    everything = fit_texts(texts[:3], 3_000)
    assert everything.texts == texts[:3] and everything.describe("observations") == ""


def test_clipping_outside_ascii_stays_within_its_tokens():
    text = "記憶" * 50_000
    clipped = clip(text, 500)
    assert item_tokens(clipped) <= 500 and clipped.startswith("記憶記憶") and "100,000 characters" in clipped


def test_cut_item_and_clip_long_keep_what_is_short():
    item = {"entityName": "log", "addedObservations": ["line " * 40] * 3_000}
    cut, note = cut_item(item, 1_000)
    assert item_tokens(cut) <= 1_000 and cut["entityName"] == "log" and "of 3000 addedObservations shown" in note
    assert cut_item({"a": "b"}, 100) == ({"a": "b"}, None)
    small = {"name": "n", "observations": ["short"]}
    assert clip_long(small, 50) is small
    long = clip_long({"name": "n", "observations": ["short", "z" * 10_000]}, 50)
    assert long["observations"][0] == "short" and item_tokens(long["observations"][1]) <= 50


def test_a_budget_less_what_is_spent_around_a_result():
    assert Budget(20_000).less(1_500).max_tokens == 18_500
    assert Budget(0).less(1_500).unlimited
