from hypothesis import given, settings
from hypothesis import strategies as st

from memory_server.graph import Entity, KnowledgeGraph
from memory_server.keyword import KeywordIndex


def upstream_search(graph: KnowledgeGraph, query: str) -> list[Entity]:
    """The official server's searchNodes, written out plainly as the reference for keyword mode."""
    needle = query.lower()
    return [
        e
        for e in graph.entity_list()
        if needle in e.name.lower()
        or needle in e.entity_type.lower()
        or any(needle in o.lower() for o in e.observations)
    ]


def test_keyword_search_is_case_insensitive_substring_with_touching_relations(tmp_path):
    graph = KnowledgeGraph.parse(
        '{"type":"entity","name":"Ann","entityType":"person","observations":["likes hiking"]}\n'
        '{"type":"entity","name":"Shop","entityType":"project","observations":[]}\n'
        '{"type":"entity","name":"Bo","entityType":"dog","observations":[]}\n'
        '{"type":"relation","from":"Ann","to":"Shop","relationType":"works on"}\n'
    )
    assert [(h.entity.name, h.observation) for h in KeywordIndex(graph).hits("HIKING", None)] == [
        ("Ann", "likes hiking")
    ]
    assert [r.key for r in graph.relations_touching(["Ann"])] == [("Ann", "Shop", "works on")]
    assert [(h.entity.name, h.observation) for h in KeywordIndex(graph).hits("PROJ", None)] == [("Shop", None)]
    assert KeywordIndex(graph).hits("cat", None) == []


texts = st.text(alphabet=st.sampled_from("aAbBcC xé\x00İ"), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.lists(texts, max_size=3)), max_size=6), texts)
def test_keyword_mode_is_exactly_the_official_search(items, query):
    graph = KnowledgeGraph()
    graph.create_entities(Entity(n, t, list(o)) for n, t, o in items)
    expected = upstream_search(graph, query)
    assert [h.entity for h in KeywordIndex(graph).hits(query, None)] == expected
    assert [h.entity for h in KeywordIndex(graph).hits(query, 2)] == expected[:2]
