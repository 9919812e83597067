"""Error texts never grow with what was sent: a long value is quoted by its start and its length, a long list by
its first items and how many more."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_server.errors import EntityNotFoundError, listed, shortened
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.project import ProjectNotFoundError
from memory_server.registry import UnknownContextError


def test_a_missing_entity_is_named_as_the_official_server_does_unless_its_name_is_huge():
    assert str(EntityNotFoundError("Ghost")) == "Entity with name Ghost not found"
    huge = str(EntityNotFoundError("N" * 500_000))
    assert len(huge) < 200 and huge.startswith("Entity with name NNNN") and "(500,000 characters)" in huge


def test_graph_changes_naming_a_huge_missing_entity_fail_briefly():
    graph = KnowledgeGraph()
    graph.create_entities([Entity("a", "t", [])])
    with pytest.raises(EntityNotFoundError) as missing:
        graph.add_observations([("N" * 500_000, ["x"])])
    assert len(str(missing.value)) < 200
    with pytest.raises(EntityNotFoundError) as missing:
        graph.create_relations([Relation("a", "B" * 500_000, "r")])
    assert len(str(missing.value)) < 200


def test_lists_in_errors_show_their_first_items_and_count_the_rest():
    assert listed(["a", "b"]) == "a, b"
    many = listed([f"m{i}" for i in range(5_000)])
    assert many.startswith("m0, m1,") and many.endswith("m9 and 4,990 more") and len(many) < 100
    assert shortened("x" * 81).endswith("… (81 characters)") and shortened("short") == "short"


def test_unknown_context_and_project_errors_stay_short_with_thousands_of_names():
    unknown = str(UnknownContextError("nope", [f"c{i}" for i in range(3_000)]))
    assert len(unknown) < 300 and "and 2,990 more" in unknown
    markers = [f"marker-{i}" for i in range(20_000)]
    missing = str(ProjectNotFoundError("mk", Path("/tmp"), "the start folder", [Path("/tmp")], markers))
    assert len(missing) < 1_000 and "and 19,990 more" in missing
