import json

from memory_server.graph import KnowledgeGraph
from memory_server.stats import figures, overview


def graph_of(*lines: dict | str) -> KnowledgeGraph:
    return KnowledgeGraph.parse("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def e(name: str, kind: str = "person", *observations: str) -> dict:
    return {"type": "entity", "name": name, "entityType": kind, "observations": list(observations)}


def r(source: str, target: str, kind: str = "knows") -> dict:
    return {"type": "relation", "from": source, "to": target, "relationType": kind}


def test_overview_counts_types_and_the_most_connected():
    graph = graph_of(
        e("a", "person", "1", "2"), e("b", "person"), e("c", "project"), e("d", "person"),
        r("a", "c"), r("b", "c"), r("d", "c"), r("a", "b"), r("c", "c", "self"),
    )  # fmt: skip
    summary = overview(graph)
    assert summary["entities"] == 4 and summary["relations"] == 5 and summary["observations"] == 2
    assert summary["entityTypes"] == {"person": 3, "project": 1}
    assert [(h["name"], h["relations"]) for h in summary["mostConnected"]] == [("c", 4), ("a", 2), ("b", 2), ("d", 1)]


def test_the_stats_commands_figures():
    graph = graph_of(
        e("a", "person", "1", "2"), e("b", "person"), e("c", "project", "3"), e("d", "tool"),
        r("a", "c", "works on"), r("b", "c", "works on"), r("a", "b"), r("a", "ghost"), "not json",
    )  # fmt: skip
    assert figures(graph) == {
        "entities": 4,
        "relations": 4,
        "observations": 3,
        "entityTypes": [("person", 2), ("project", 1), ("tool", 1)],
        "relationTypes": [("works on", 2), ("knows", 2)],
        "mostConnected": [("a", 3), ("c", 2), ("b", 2)],
        "mostObservations": [("a", 2), ("c", 1)],
        "withoutRelations": 1,
        "danglingRelations": 1,
        "unusableLines": 1,
    }


def test_stats_and_the_overview_count_a_relation_to_itself_once():
    graph = graph_of(e("a"), e("b"), r("a", "b"), r("a", "a", "self"))
    assert figures(graph)["mostConnected"] == [("a", 2), ("b", 1)]
    assert [(h["name"], h["relations"]) for h in overview(graph)["mostConnected"]] == [("a", 2), ("b", 1)]
