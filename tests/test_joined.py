"""Texts lower-cased into one string: each text as `str.lower` makes it alone, found where it is."""

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_server import joined
from memory_server.joined import JoinedText

# Letters whose lower case depends on their neighbours ("Σ" ends a word as "ς") or is longer ("İ": two characters)
texts = st.lists(st.text(st.sampled_from("aAzΣσΑΒİIiß'\u0301\u00ad .\x00\n\u00e9É"), max_size=6), max_size=12)


@settings(max_examples=300, deadline=None)
@given(texts=texts, chunk=st.sampled_from([1, 2, 3, 4096]))
def test_each_text_is_lower_cased_as_alone(texts, chunk):
    before, joined._CHUNK = joined._CHUNK, chunk  # several chunks, some with a letter that grows, some not
    try:
        found = JoinedText(texts)
    finally:
        joined._CHUNK = before
    assert found.text == "".join(text.lower() + JoinedText.GAP for text in texts)
    ends = [*found.starts[1:], len(found.text)]
    assert [found.text[start : end - 1] for start, end in zip(found.starts, ends)] == [t.lower() for t in texts]


def test_the_texts_that_hold_a_needle():
    said = JoinedText(["ΟΔΟΣ ΑΘΗΝΑΣ", "İstanbul trip", "Hannah's mother", "hannah", ""])
    assert said.holders("ΟΔΟΣ".lower()) == [0] and said.holders("οδοσ") == []  # a final sigma, as alone
    assert said.holders("trip") == [1] and said.holders("hannah") == [2, 3]
