"""Kinship words of a question against the roles an entity has for the user."""

import pytest

from memory_server.kinship import KIND, SAME, as_theirs, kin, named_in, qualified, role_fit, same_relative


def test_a_kinship_word_names_a_kind_of_relative_and_maybe_a_sex():
    assert kin("mum") == ("parent", "f")
    assert kin("kids") == ("child", "")
    assert kin("boss") is None


@pytest.mark.parametrize(
    ("word", "roles", "fit"),
    [
        ("daughter", {"daughter"}, SAME),
        ("mum", {"mother"}, SAME),  # another word for the same relative
        ("daughter", {"child"}, KIND),  # a child may be a daughter
        ("daughter", {"child", "son"}, 0.0),  # a son is not
        ("daughter", {"parent"}, 0.0),  # near "daughter" to a static model, yet another relative
        ("husband", {"married to"}, KIND),  # the words of a relation type count
        ("kids", {"parent of", "son"}, SAME),
        ("sister", {"sibling of"}, KIND),
        ("daughter", {"manager"}, None),  # no kinship in the roles: the embedding decides
        ("boss", {"parent"}, None),  # no kinship word asked
    ],
)
def test_roles_fit_a_kinship_word_by_the_relative_they_say(word, roles, fit):
    assert role_fit(word, roles) == fit


@pytest.mark.parametrize(
    ("word", "roles", "fit"),
    [
        ("mum", {"mother in law"}, 0.0),  # "mother-in-law": another relative, not a mother of the user
        ("brother", {"brother in law"}, 0.0),
        ("kids", {"parent in law"}, 0.0),
        ("wife", {"ex wife"}, 0.0),  # "ex-wife": no longer the wife
        ("husband", {"former husband"}, 0.0),
        ("husband", {"business partner"}, None),  # a partner in business, not in life
        ("husband", {"life partner"}, KIND),
        ("mum", {"stepmother"}, 0.0),  # a stepmother is not the mother ("parent", from child_of, is)
        ("mum", {"step mother"}, 0.0),
        ("stepmother", {"step mother"}, SAME),
    ],
)
def test_a_qualified_kinship_word_says_another_relative(word, roles, fit):
    assert role_fit(word, roles) == fit


@pytest.mark.parametrize(
    ("word", "other"),
    [("husband", "spouse"), ("wife", "spouse"), ("brother", "sibling"), ("sister", "sibling"),
     ("grandson", "grandparent"), ("nephew", "aunt or uncle"), ("aunt", "niece or nephew"), ("mother", "child"),
     ("daughter", "parent"), ("cousin", "cousin"), ("boss", None), ("younger brother", "sibling"),
     ("step mother", "step child"), ("business partner", None), ("mother in law", None), ("ex wife", "ex spouse")],
)  # fmt: skip
def test_the_relative_at_the_other_end(word, other):
    from memory_server.kinship import converse

    assert converse(word) == other


def test_the_relatives_a_question_names():
    assert named_in("what does my husband do") == [("spouse", "m")]
    assert named_in("when is my daughter's birthday") == [("child", "f")]
    assert named_in("what does my partner do for a living") == [("spouse", "")]  # a possessive keeps a spouse
    assert named_in("where does Cian's partner live") == [("spouse", "")]
    # qualified, a kinship word names another relative, or none a question means
    assert named_in("where does my mother-in-law live") == [("parent in law", "f")]  # the spouse's mother
    assert named_in("what's my ex-wife's job") == [("ex spouse", "f")]  # someone, but not the wife
    assert named_in("what does my business partner do") == []
    assert named_in("who is my dentist") == []


def test_the_kinship_words_a_question_qualifies():
    assert qualified("where does my mother-in-law live") == set()  # "mother" names the parent in law
    assert qualified("what's my ex-wife's job") == set()  # "wife" names the ex-spouse
    assert qualified("what does my business partner do") == {"partner"}
    assert qualified("what does my mother do") == set()
    assert qualified("what does my partner do") == set()


def test_a_kinship_word_said_in_law_fits_the_spouses_relative():
    from memory_server.kinship import relatives_in

    named = relatives_in("when is my mother in law's birthday")
    assert named == {"mother": ("parent in law", "f")}
    assert role_fit("mother", {"mother in law", "parent in law"}, named["mother"]) == SAME
    assert role_fit("mother", {"parent"}, named["mother"]) == 0.0  # the user's own mother is not
    assert relatives_in("who is my brother-in-law") == {"brother": ("sibling in law", "m")}
    assert relatives_in("what's my ex-wife's job") == {"wife": ("ex spouse", "f")}


def test_an_ex_spouse_is_asked_for_by_ex_and_never_as_the_spouse():
    from memory_server.kinship import relatives_in

    asked = relatives_in("what's my ex-wife's number")["wife"]
    assert role_fit("wife", {"ex wife"}, asked) == SAME
    assert role_fit("wife", {"married to"}, asked) == 0.0  # the wife now is not the ex
    assert role_fit("wife", {"ex wife"}) == 0.0  # nor is the ex "my wife"
    assert role_fit("husband", {"ex spouse"}, relatives_in("my former husband")["husband"]) == KIND


def test_an_ex_alone_is_the_ex_spouse_and_before_another_word_makes_that_one_former():
    from memory_server.kinship import relatives_in

    assert named_in("how much maintenance does my ex pay") == [("ex spouse", "")]
    assert named_in("when does my ex pick up the kids") == [("ex spouse", ""), ("child", "")]
    assert role_fit("ex", {"ex husband"}, relatives_in("what's my ex's number")["ex"]) == SAME
    assert role_fit("ex", {"married to"}) == 0.0  # the spouse now is not the ex
    # "ex" says whose: the wife is the ex-spouse; an ex-boss or an ex-flatmate is no relative at all
    assert relatives_in("what's my ex-wife's job") == {"wife": ("ex spouse", "f")}
    assert named_in("what's my ex-boss's number") == []
    assert named_in("where does my ex flatmate live") == []
    # joined to a word, "ex-" always makes that one former, whatever it is; "ex" not said as theirs is no one's
    for question in ("what's my ex-tenant's number", "my ex-business partner's number", "my ex-directory landline"):
        assert named_in(question) == [], question
    assert named_in("what's the laptop price ex VAT for my work") == []


def test_a_boy_or_a_girl_said_as_someones_is_their_son_or_daughter():
    assert as_theirs("boy") == "son" and as_theirs("girls") == "daughters"
    assert as_theirs("teacher") == "teacher"
    assert kin("girl") is None  # alone, never a relative: "birthday girl", "girl guides"


def test_a_relative_of_the_kind_asked_for_and_no_other_sex():
    assert same_relative("kids", "son") and same_relative("sons", "son")
    assert not same_relative("daughter", "son")
    assert not same_relative("mother", "son") and not same_relative("school", "son")
