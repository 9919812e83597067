"""Kinship words of a question against the roles an entity has for the user."""

import pytest

from memory_server.kinship import KIND, SAME, kin, role_fit


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
