from collections import OrderedDict

import numpy as np
import pytest

from memory_server import searcher as searcher_module
from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity, Relation
from memory_server.lexical import LexicalIndex, related_terms, spelled_out, stem, tokenize
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore

PEOPLE = [
    Entity("Ann", "person", ["likes hiking in the mountains on weekends", "works as a nurse at the city hospital"]),
    Entity("Bob", "person", ["plays chess every evening", "drives a red pickup truck"]),
    Entity("Carla", "person", ["is allergic to peanuts", "moved to Lisbon in 2021"]),
    Entity("Annex building", "place", ["the storage room is on the second floor"]),
]


@pytest.fixture(scope="module")
def bundled():
    slot = EmbedderSlot()
    slot.start()
    return slot


def store_with(tmp_path, name: str, entities, relations=()) -> GraphStore:
    store = GraphStore(tmp_path / f"{name}.jsonl")
    store.mutate(
        lambda g: (
            g.create_entities(Entity(e.name, e.entity_type, list(e.observations)) for e in entities),
            g.create_relations(relations),
        )
    )
    return store


def first(outcome):
    hit = outcome.hits[0].hit
    return hit.entity.name, hit.observation


def test_a_question_phrased_differently_finds_the_observation(tmp_path, bundled):
    searcher = Searcher(bundled)
    store = store_with(tmp_path, "people", PEOPLE)
    assert first(searcher.search([Target("m", store)], "who goes walking outdoors?", "hybrid", 10, None)) == (
        "Ann",
        "likes hiking in the mountains on weekends",
    )
    assert first(searcher.search([Target("m", store)], "who lives in Portugal", "semantic", 10, None)) == (
        "Carla",
        "moved to Lisbon in 2021",
    )
    assert first(searcher.search([Target("m", store)], "who has a medical job", "semantic", 10, None))[0] == "Ann"
    assert first(searcher.search([Target("m", store)], "what vehicle does Bob own", "hybrid", 10, None)) == (
        "Bob",
        "drives a red pickup truck",
    )


def test_an_exact_name_match_ranks_first(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(bundled).search([Target("m", store)], "anne", "hybrid", 10, None)
    assert [h.hit.entity.name for h in outcome.hits[:1]] == ["Annex building"]
    outcome = Searcher(bundled).search([Target("m", store)], "Ann", "hybrid", 3, None)
    assert {h.hit.entity.name for h in outcome.hits[:2]} == {"Ann", "Annex building"}
    assert all(h.hit.observation is None for h in outcome.hits[:2])


def test_limit_min_score_and_the_search_description(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(bundled).search([Target("m", store)], "who plays or drives what", "hybrid", 2, None)
    assert len(outcome.hits) == 2 and outcome.semantic and outcome.model.startswith("bundled:")
    scores = [h.hit.score for h in outcome.hits]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
    loose = Searcher(bundled).search([Target("m", store)], "hospital job", "hybrid", 10, None)
    assert [h.hit.observation for h in loose.hits] == ["works as a nurse at the city hospital"]
    threshold = loose.hits[0].hit.score
    strict = Searcher(bundled).search([Target("m", store)], "hospital job", "hybrid", 10, threshold)
    assert [h.hit.observation for h in strict.hits] == ["works as a nurse at the city hospital"]
    none = Searcher(bundled).search([Target("m", store)], "hospital job", "hybrid", 10, threshold + 0.01)
    assert none.hits == [] and "minScore" in none.note


def test_cross_context_hits_are_labelled_and_the_project_wins_a_near_tie(tmp_path, bundled):
    work = store_with(tmp_path, "work", [Entity("Release", "process", ["we release the app on Fridays"])])
    project = store_with(tmp_path, "project", [Entity("Release", "process", ["we release the app on Fridays"])])
    plain = Searcher(bundled).search(
        [Target("work", work), Target("project", project)], "when do we release new versions", "hybrid", 10, None
    )
    assert {h.label for h in plain.hits} == {"work", "project"}
    assert plain.hits[0].hit.score == pytest.approx(plain.hits[1].hit.score)
    for first, second in ((work, project), (project, work)):  # whatever the order of the memories
        targets = [Target("work", work), Target("project", project, boost=0.05)]
        preferred = Searcher(bundled).search(
            targets if first is work else targets[::-1], "app releases", "hybrid", 10, None
        )
        assert [h.label for h in preferred.hits] == ["project", "work"]
        assert preferred.hits[0].hit.score == pytest.approx(min(1.0, preferred.hits[1].hit.score * 1.05))


def test_a_relevant_hit_from_another_context_beats_an_irrelevant_project_hit(tmp_path, bundled):
    personal = store_with(
        tmp_path,
        "personal",
        [
            Entity("Priya Shah", "person", ["lives in Leeds", "reports to Dana Okoro at Acme"]),
            Entity("Dana Okoro", "person", ["Priya's manager at Acme", "runs the payments team"]),
        ],
        [Relation("Priya Shah", "Dana Okoro", "reports to")],
    )
    project = store_with(
        tmp_path,
        "project",
        [
            Entity("Testing", "convention", ["tests run with pytest -x", "CI runs on GitHub Actions"]),
            Entity("Style", "convention", ["formatted with ruff, line length 100"]),
        ],
    )
    targets = [Target("personal", personal), Target("project", project, boost=0.15)]  # even a strong preference
    outcome = Searcher(bundled).search(targets, "who is my manager", "hybrid", 10, None)
    assert (outcome.hits[0].label, outcome.hits[0].hit.observation) == ("personal", "Priya's manager at Acme")
    assert "project" not in {h.label for h in outcome.hits}  # one cut-off for all: the weak project hits are out
    own = Searcher(bundled).search(
        [Target("project", project, boost=0.15)], "how do I run the tests", "hybrid", 10, None
    )
    assert own.hits[0].hit.observation == "tests run with pytest -x"


def test_a_nonsense_query_returns_nothing_with_a_note(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    for query in ("asdf qwerty zxcv", "blorptastic frobnication", "xyzzy"):
        outcome = Searcher(bundled).search([Target("m", store)], query, "hybrid", 10, None)
        assert outcome.hits == [], query
        assert "nothing relevant" in outcome.note and "keyword" in outcome.note and "context" in outcome.note
    everywhere = Searcher(bundled).search(
        [Target("a", store), Target("b", store_with(tmp_path, "b", PEOPLE[:1]))], "qwertyuiop", "hybrid", 10, None
    )
    assert everywhere.hits == [] and "any memory searched" in everywhere.note


def test_a_large_memory_answers_nonsense_with_nothing(tmp_path, bundled):
    # In a large memory some "hub" documents get a high cosine with any text: it takes a shared word, or a cosine
    # that stands far above the query's others, to count.
    notes = [Entity(f"Note {n}", "note", [f"{thing} on {day}"]) for n, (thing, day) in enumerate(_NOTES)]
    store = store_with(tmp_path, "notes", PEOPLE + notes)
    searcher = Searcher(bundled)
    assert searcher.search([Target("m", store)], "asdf qwerty zxcv", "hybrid", 10, None).hits == []
    assert searcher.search([Target("m", store)], "asdf qwerty zxcv", "semantic", 10, None).hits == []
    found = searcher.search([Target("m", store)], "who is allergic to nuts", "hybrid", 10, None)
    assert first(found) == ("Carla", "is allergic to peanuts")


_NOTES = [
    (thing, day)
    for thing in (
        "bought milk and bread",
        "called the plumber about the leak",
        "paid the electricity bill",
        "took the car to the garage",
        "booked a table for dinner",
        "renewed the library books",
        "watered the plants",
        "sent the invoice to the client",
        "cleaned the gutters",
        "picked up the dry cleaning",
    )
    for day in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
]


def test_name_or_type_lines_only_when_the_name_or_type_matched(tmp_path, bundled):
    store = store_with(tmp_path, "people", [*PEOPLE, Entity("Garden shed", "place", [])])
    searcher = Searcher(bundled)
    outcome = searcher.search([Target("m", store)], "who drives a truck", "hybrid", 10, None)
    assert all(h.hit.observation is not None for h in outcome.hits)
    shed = searcher.search([Target("m", store)], "where is the shed", "hybrid", 10, None)
    assert [(h.hit.entity.name, h.hit.observation) for h in shed.hits] == [("Garden shed", None)]


def test_first_person_questions_find_the_users_facts(tmp_path, bundled):
    store = store_with(tmp_path, "personal", PRIYA, PRIYA_RELATIONS)
    searcher = Searcher(bundled)
    for question, answer in (
        ("where do I live", ("Priya Shah", "Lives in Leeds with her husband Tom")),
        ("where do I work", ("Priya Shah", "Works as a data analyst at Acme")),
        ("what am I allergic to", ("Priya Shah", "Allergic to penicillin")),
        ("who is my manager", ("Dana Okoro", "Priya's manager at Acme")),
    ):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert first(outcome) == answer, (question, [(h.hit.entity.name, h.hit.observation) for h in outcome.hits])
    # No word in common: the meaning alone still brings the answer near the top.
    boss = searcher.search([Target("m", store)], "who is my boss", "hybrid", 10, None)
    assert ("Dana Okoro", "Priya's manager at Acme") in [(h.hit.entity.name, h.hit.observation) for h in boss.hits[:3]]
    # Asked about someone else, the same words find that person's facts.
    assert first(searcher.search([Target("m", store)], "where does Tom Reed live", "hybrid", 10, None)) == (
        "Tom Reed",
        "Lives in Leeds; grew up in Bristol",
    )


PRIYA = [
    Entity(
        "Priya Shah",
        "person",
        [
            "Lives in Leeds with her husband Tom",
            "Works as a data analyst at Acme",
            "Allergic to penicillin",
            "Plays badminton on Tuesdays",
            "Born in 1990 in Pune",
        ],
    ),
    Entity(
        "Tom Reed",
        "person",
        ["Priya's husband", "Teaches history at a secondary school", "Lives in Leeds; grew up in Bristol"],
    ),
    Entity("Dana Okoro", "person", ["Priya's manager at Acme", "Lives in York"]),
    Entity("Sam Patel", "person", ["Priya's colleague", "Lives in Manchester", "Allergic to cats"]),
    Entity("Maya Chen", "person", ["Works as a nurse in Sheffield", "Lives in Sheffield with two cats"]),
    Entity("Acme", "organization", ["Retail analytics company in Leeds"]),
]
PRIYA_RELATIONS = [
    Relation("Priya Shah", "Tom Reed", "married to"),
    Relation("Priya Shah", "Dana Okoro", "reports to"),
    Relation("Priya Shah", "Acme", "works at"),
    Relation("Sam Patel", "Acme", "works at"),
]


def test_without_a_model_hybrid_and_semantic_rank_by_keywords_and_say_so(tmp_path):
    slot = EmbedderSlot("none")
    slot.start()
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(slot).search([Target("m", store)], "chess evenings", "semantic", 10, None)
    assert not outcome.semantic and outcome.model is None
    assert "keywords" in outcome.note and "off" in outcome.note
    assert first(outcome) == ("Bob", "plays chess every evening")


def test_the_index_follows_changes_to_the_file(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    searcher = Searcher(bundled)
    assert searcher.search([Target("m", store)], "violin", "keyword", None, None).hits == []
    other = GraphStore(store.path)  # another process, as far as `store` can tell
    other.mutate(lambda g: g.add_observations([("Bob", ["plays the violin"])]))
    assert first(searcher.search([Target("m", store)], "violin", "keyword", None, None)) == ("Bob", "plays the violin")
    assert first(searcher.search([Target("m", store)], "violin music", "hybrid", 10, None)) == (
        "Bob",
        "plays the violin",
    )


def test_relations_of_the_hits_come_along(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE, [Relation("Ann", "Bob", "knows"), Relation("Carla", "Bob", "knows")])
    outcome = Searcher(bundled).search([Target("m", store)], "nurse", "keyword", None, None)
    assert [h.hit.entity.name for h in outcome.hits] == ["Ann"]
    assert [r.key for r in outcome.hits[0].relations] == [("Ann", "Bob", "knows")]


def test_bm25_prefers_rarer_words_and_normalises_to_one():
    index = LexicalIndex([tokenize("the cat sat"), tokenize("the dog sat"), tokenize("a cat and a dog")])
    scores = index.scores("cat")
    assert scores[1] == 0 and scores[0] > 0 and scores[2] > 0
    assert index.scores("zebra").max() == 0
    assert tokenize("Hiking hikes hiked stories story") == ["hike", "hike", "hike", "stori", "stori"]


def test_a_related_word_earns_a_share_of_the_query_words_weight():
    index = LexicalIndex([tokenize("Dana is Priya's manager"), tokenize("the boss of the band"), tokenize("tea")])
    with_related, exact = index.matches("who is my boss", {"boss": [("manag", 0.3)]})
    assert exact[0] == 0 and exact[1] > 0  # the query's own words only
    assert 0 < with_related[0] < with_related[1] == exact[1]  # a related word is a partial match, never a full one
    assert with_related[2] == 0
    # A word the memory lacks still counts, as its rarest possible self: a related word alone stays partial.
    only, _ = LexicalIndex([tokenize("Priya's manager"), tokenize("tea")]).matches("boss", {"boss": [("manag", 0.3)]})
    assert 0 < only[0] < 0.5


def test_related_terms_are_the_memorys_words_nearest_to_the_querys():
    nearest = {"boss": [("bosses", 0.7), ("supervisor", 0.5), ("leader", 0.48), ("manager", 0.36)], "tea": []}
    vocabulary = {term: n for n, term in enumerate(tokenize("supervisor leader manager boss tea"))}
    found = related_terms("who is my boss, tea?", lambda word: nearest.get(word, []), vocabulary)
    assert found == {"boss": [("supervisor", 0.25), ("leader", 0.24)]}  # in the memory, above the floor, weighted


def test_stemming_variants_meet(tmp_path):
    assert tokenize("lives") == tokenize("live") == tokenize("living") == tokenize("lived")
    assert tokenize("teaches") == tokenize("teaching") == tokenize("teach")
    slot = EmbedderSlot("none")  # keywords only: the words alone must meet
    slot.start()
    store = store_with(
        tmp_path, "people", [Entity("Ann", "person", ["Ann lives in Leeds"]), Entity("Bob", "person", ["Bob drives"])]
    )
    for query in ("where does Ann live", "Ann living", "who lived in Leeds"):
        assert first(Searcher(slot).search([Target("m", store)], query, "hybrid", 10, None)) == (
            "Ann",
            "Ann lives in Leeds",
        ), query


def test_words_meet_with_or_without_their_accents(tmp_path):
    assert tokenize("Siobhán Ní Bhriain") == tokenize("siobhan ni bhriain")
    assert tokenize("Müller café") == tokenize("Muller cafe")
    slot = EmbedderSlot("none")  # keywords only: the words alone must meet
    slot.start()
    people = [Entity("Siobhán Ní Bhriain", "person", ["Runs the café on Quay St"]), Entity("Bob", "person", ["Bob"])]
    store = store_with(tmp_path, "people", people)
    for query in ("siobhan", "who runs the cafe"):
        found = Searcher(slot).search([Target("m", store)], query, "hybrid", 10, None)
        assert first(found)[0] == "Siobhán Ní Bhriain", query


def test_an_exact_name_beats_a_longer_name_and_any_boost(tmp_path, bundled):
    first = store_with(tmp_path, "first", [Entity("Annex", "place", ["a storage building"])])
    second = store_with(tmp_path, "second", [Entity("Ann", "person", ["a nurse"])])
    project = store_with(tmp_path, "project", [Entity("Notes", "note", ["Ann Ann Ann"])])
    targets = [Target("first", first), Target("second", second), Target("project", project, boost=0.15)]
    outcome = Searcher(bundled).search(targets, "ann", "hybrid", 10, None)
    assert [(h.label, h.hit.entity.name, h.hit.observation) for h in outcome.hits[:2]] == [
        ("second", "Ann", None),
        ("first", "Annex", None),
    ]
    assert all(0 <= h.hit.score <= 1 for h in outcome.hits)


def test_a_strong_match_leaves_out_the_unrelated_tail(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(bundled).search([Target("m", store)], "chess", "hybrid", 10, None)
    assert [(h.hit.entity.name, h.hit.observation) for h in outcome.hits] == [("Bob", "plays chess every evening")]


@pytest.mark.anyio
async def test_over_stdio_first_person_questions_and_nonsense(tmp_path):
    """Through the real server and the SDK's client: the user's facts for "I"/"my" questions; nothing (with the
    note, and no filler line) for nonsense."""
    from helpers import connect, ok, server_env, text_of

    memory = tmp_path / "memory.jsonl"
    async with connect(server_env(MEMORY_FILE_PATH=memory)) as session:
        people = [{"name": e.name, "entityType": e.entity_type, "observations": list(e.observations)} for e in PRIYA]
        await ok(session, "create_entities", entities=people)
        await ok(
            session,
            "create_relations",
            relations=[{"from": r.source, "to": r.target, "relationType": r.relation_type} for r in PRIYA_RELATIONS],
        )
        found = await ok(session, "search_nodes", query="where do I live")
        assert (found["matches"][0]["entityName"], found["matches"][0]["observation"]) == (
            "Priya Shah",
            "Lives in Leeds with her husband Tom",
        )
        assert found["entities"][0]["name"] == "Priya Shah"
        result = await session.call_tool("search_nodes", {"query": "asdf qwerty zxcv"})
        assert result.structured_content["matches"] == [] and result.structured_content["entities"] == []
        text = text_of(result)
        assert "0 matches" in text and "nothing relevant found" in text and "name or type matched" not in text


def test_a_smaller_limit_returns_the_first_hits_of_a_larger_one_even_among_ties(tmp_path, bundled):
    """Names that all contain the query score the same: which of them a limit keeps must not be left to a partial
    sort (it picked a different few for every memory size); the first in the file come first, as with no limit."""
    tickets = [Entity(f"Ticket {n}", "ticket", [f"Refactor the module {n} before the audit"]) for n in range(60)]
    store = store_with(tmp_path, "tickets", tickets)
    searcher = Searcher(bundled)
    everything = searcher.search([Target("m", store)], "ticket", "hybrid", None, None)
    names = [h.hit.entity.name for h in everything.hits]
    assert names[:3] == ["Ticket 0", "Ticket 1", "Ticket 2"]
    for limit in (1, 3, 7, 20):
        some = searcher.search([Target("m", store)], "ticket", "hybrid", limit, None)
        assert [h.hit.entity.name for h in some.hits] == names[:limit]


def test_a_query_that_is_an_entity_type_finds_the_entities_of_that_type(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE + [Entity("Dora", "Person", ["keeps bees"])])
    searcher = Searcher(bundled)

    def typed(query):
        outcome = searcher.search([Target("m", store)], query, "hybrid", 10, None)
        return [h.hit.entity.name for h in outcome.hits if h.hit.observation is None]

    assert typed("person") == typed(" PERSONS ") == ["Ann", "Bob", "Carla", "Dora"]
    assert typed("places") == ["Annex building"]
    assert typed("my person") == typed("a person who plays chess") == []


def test_the_next_page_of_a_search_follows_the_ranking_of_the_page_before(tmp_path, bundled):
    """The re-ranker reads a memory whole in the background, so the same search may rank otherwise a minute later:
    a cursor's next page comes from the outcome its first page came from, while the memory is unchanged."""
    store = store_with(tmp_path, "people", PEOPLE)
    searcher = Searcher(bundled)
    first = searcher.search([Target("m", store)], "chess", "hybrid", 10, None)
    assert searcher.search([Target("m", store)], "chess", "hybrid", 10, None, again=True) is first
    assert searcher.search([Target("m", store)], "chess", "hybrid", 10, None) is not first  # a new search: anew
    assert searcher.search([Target("other", store)], "chess", "hybrid", 10, None, again=True) is not first
    GraphStore(store.path).mutate(lambda g: g.add_observations([("Bob", ["won a chess cup"])]))
    changed = searcher.search([Target("m", store)], "chess", "hybrid", 10, None, again=True)
    assert "won a chess cup" in [h.hit.observation for h in changed.hits]


def test_a_next_page_is_found_even_if_another_search_drops_its_outcome_meanwhile(tmp_path, bundled):
    """Searches run on several threads: the outcome a cursor asks for may be dropped (by another search's) between
    finding it and reading it, which must not fail the call."""

    class DroppedMeanwhile(OrderedDict):
        def __contains__(self, key):  # found, then dropped by another thread before it is read
            found = super().__contains__(key)
            self.pop(key, None)
            return found

    store = store_with(tmp_path, "people", PEOPLE)
    searcher = Searcher(bundled)
    searcher._recent = DroppedMeanwhile()
    searcher.search([Target("m", store)], "chess", "hybrid", 10, None)
    again = searcher.search([Target("m", store)], "chess", "hybrid", 10, None, again=True)
    assert "plays chess every evening" in [h.hit.observation for h in again.hits]


def test_the_outcomes_kept_for_next_pages_hold_a_bounded_number_of_hits(tmp_path, bundled, monkeypatch):
    """A keyword search holds every match: kept 16 times over for a large memory, gigabytes (the newest is kept
    whatever its size, for its next page)."""
    monkeypatch.setattr(searcher_module, "RECENT_HITS", 5)
    store = store_with(tmp_path, "people", [Entity(f"n{i}", "note", [f"apples {i}"]) for i in range(4)])
    searcher = Searcher(bundled)
    outcomes = [searcher.search([Target("m", store)], "apples", "keyword", None, s / 10) for s in range(4)]
    assert [len(o.hits) for o in outcomes] == [4, 4, 4, 4]
    assert sum(len(o.hits) for o in searcher._recent.values()) <= 5
    assert searcher.search([Target("m", store)], "apples", "keyword", None, 0.3, again=True) is outcomes[-1]


def test_chat_shorthand_is_spelled_out_beside_itself():
    assert spelled_out("whens noahs bday") == "whens noahs bday birthday"  # a note may say "bday" too
    assert spelled_out("my hubby's appt") == "my hubby husband's appt appointment"
    assert spelled_out("a bdayx, a mobster") == "a bdayx, a mobster"  # whole words only
    # ambiguous ones are left as said: "GF" is gluten-free on a menu, "BF" a best friend or breakfast
    assert spelled_out("GF options nearby, BF at 8") == "GF options nearby, BF at 8"


def test_a_postcode_or_a_plate_is_asked_beside_the_word_its_note_says():
    assert spelled_out("what's my postcode") == "what's my postcode address"  # "Address: 31 Ivygreen Rd, M21 9FF"
    assert spelled_out("our zip code?") == "our zip code address?"
    assert spelled_out("what's my number plate") == "what's my number plate reg"  # "reg MA19 KXP"
    assert spelled_out("zip the logs") == "zip the logs"


def test_weekdays_and_months_as_notes_shorten_them_meet_the_whole_word():
    assert tokenize("Outdoor practice Mon + Wed, Tue-Thu in the office") == tokenize(
        "Outdoor practice Monday + Wednesday, Tuesday-Thursday in the office"
    )
    assert tokenize("next check-up 4 Feb, Sept or Dec") == tokenize("next check-up 4 February, September or December")
    # Those that are words or names as well count beside a figure only
    assert tokenize("Story time Sat 11am, 12 Jan, Mar 3") == tokenize("Story time Saturday 11am, 12 January, March 3")
    assert tokenize("sat down with Jan in the sun") == ["sat", "jan", "sun"]
    index = LexicalIndex()
    index.add(np.array([0, 1]), [tokenize("Frisbee: outdoor practice Mon + Wed 18:00"), tokenize("Bins go out on Sunday")])
    assert index.scores("which monday is practice")[0] > 0


def test_a_day_of_the_month_said_as_an_ordinal_meets_the_dates_that_hold_it():
    nine = tokenize("the 9th")
    for date in ("2026-05-09", "09/05/2026", "9 May", "May 9th"):
        assert set(nine) <= set(tokenize(date)), date
    assert tokenize("Salary on the 25th, rent on the 1st") == tokenize("Salary on the 25, rent on the 1")
    assert tokenize("32nd street, 08:00, 100") == ["32nd", "street", "8", "00", "100"]  # no day of a month
    index = LexicalIndex()
    index.add(np.array([0, 1]), [tokenize("2026-05-09: Mom had a fall"), tokenize("Mom: room 14, east wing")])
    fall, room = index.scores("what happened with mom on the 9th")
    assert fall > room


def test_words_written_as_one_meet_words_written_as_two():
    vocabulary = {term: n for n, term in enumerate(tokenize("rollback username pick drop car pet setup"))}
    none = lambda word: []
    rollback = [("rollback", 0.9)]
    assert related_terms("how do I roll back", none, vocabulary) == {"roll": rollback, "back": rollback}
    assert related_terms("my user name", none, vocabulary)["user"] == [(stem("username"), 0.9)]
    assert related_terms("when is pickup", none, vocabulary) == {"pickup": [("pick", 0.9)]}  # a phrasal verb's noun
    assert related_terms("how do I set up", none, vocabulary) == {"set": [("setup", 0.9)]}
    assert related_terms("the new carpet", none, vocabulary) == {}  # not "car" and "pet"


def test_a_question_finds_a_note_that_writes_its_two_words_as_one(tmp_path, bundled):
    notes = [
        "Rollback: `make rollback TAG=v1.5.3` (migrations are not reversed: check them first)",
        "Deploy: tag the release, then `make deploy`",
        "Always deploy to staging first and click through the sign-up page",
        "Migrations are committed with the feature; squash only at a minor release",
        "Releases are tagged vMAJOR.MINOR.PATCH",
        "Release notes go in CHANGELOG.md before the tag",
        "A bad release in May broke the sign-up page for a day",
        "Release checklist: tests, staging, tag, deploy, announce",
        "Back up the database before a release with `make backup`",
    ]
    chores = [Entity(f"Note {n}", "note", [f"{thing} on {day}"]) for n, (thing, day) in enumerate(_NOTES)]
    store = store_with(tmp_path, "project", [Entity("Deployment", "convention", notes), *PEOPLE, *chores])
    outcome = Searcher(bundled).search([Target("m", store)], "how do I roll back a bad release", "hybrid", 10, None)
    assert first(outcome) == ("Deployment", notes[0]), [h.hit.observation for h in outcome.hits]


def test_the_users_name_alone_finds_the_user_not_names_holding_me(tmp_path, bundled):
    # A question calling the user by name is read in the first person ("Sione": "me"), but a name match is of the
    # query as typed: "me" is in "Mele Taufa", "James Meads" and "Home", none of them Sione.
    entities = [
        Entity("Sione Taufa", "person", ["Lives in Auckland", "Works as a builder", "Blood type O+"]),
        Entity("Mele Taufa", "person", ["Sione's wife", "Nurse at Middlemore"]),
        Entity("James Meads", "person", ["Rugby mate"]),
        Entity("Home", "place", ["Mortgage with ASB"]),
    ]
    relations = [Relation("Sione Taufa", "Mele Taufa", "married to"), Relation("Sione Taufa", "James Meads", "knows")]
    store = store_with(tmp_path, "sione", entities, relations)
    for query in ("Sione", "Sione Taufa"):
        outcome = Searcher(bundled).search([Target("m", store)], query, "hybrid", 10, None)
        assert outcome.hits[0].hit.entity.name == "Sione Taufa", [h.hit.entity.name for h in outcome.hits]
        assert "Home" not in {h.hit.entity.name for h in outcome.hits}
