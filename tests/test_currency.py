"""memory_server.currency: a note that says it is over goes after the one that replaced it, unless the question asks
for the past; a question that asks what holds now reads first the note that says what changed."""

import pytest

from memory_server import searcher as searcher_module
from memory_server.currency import current_first, is_over, says_change
from memory_server.graph import Entity, Relation
from memory_server.hits import NAME_MATCH_RANK, Hit, LabelledHit
from memory_server.searcher import Searcher, Target
from tests.test_rerank import slot, store_with


@pytest.mark.parametrize(
    "note",
    [
        "Mobile 07700 900412 (old number, stopped Feb 2025)",
        "Previous address: Flat 3, 22 Wilbraham Road",
        "First fix: 1.89% for 3 years, ended August 2022",
        "Used to swim at Levenshulme baths",
        "No longer works at Aviva",
        "Passport expired 2023",
    ],
)
def test_notes_that_say_they_are_over(note):
    assert is_over(note)


@pytest.mark.parametrize(
    "note",
    [
        "Plays bass guitar; old Fender Jazz from 2005",  # an old thing still owned
        "Old ThinkPad for side projects",
        "Brasserie in a former warehouse",
        "Files VAT for the previous month by the 20th",
        "About 7 years old",
        "Monthly payment £1,160, on the 1st",
    ],
)
def test_notes_that_date_something_else_are_not_over(note):
    assert not is_over(note)


def test_notes_that_say_what_changed():
    assert says_change("payments went up to £1,340 from Sept 2025")
    assert says_change("2024-06-10: azathioprine reduced to 125 mg daily")
    assert says_change("New mobile since Feb 2025: 07700 900873")
    assert not says_change("Monthly payment £1,160, on the 1st")


def labelled(entity: str, note: str | None, score: float, label: str = "m") -> LabelledHit:
    rank = score + (NAME_MATCH_RANK if note is None else 0.0)
    return LabelledHit(Hit(Entity(entity, "thing", []), note, score, rank), label, ())


OLD = "Mobile 07700 900412 (old number, stopped Feb 2025)"
NEW = "New mobile since Feb 2025: 07700 900873"
PAYMENT = "Monthly payment £1,160, on the 1st"
RAISED = "payments went up to £1,340 from Sept 2025"


def notes(hits):
    return [(h.hit.entity.name, h.hit.observation, h.hit.score) for h in hits]


def test_the_note_that_is_over_goes_after_its_replacement_in_the_places_they_held():
    hits = [labelled("me", OLD, 0.9), labelled("Dentist", "Phone 0161 555 0178", 0.8), labelled("me", NEW, 0.7)]
    assert notes(current_first("what's my phone number", hits)) == [
        ("me", NEW, 0.9),
        ("Dentist", "Phone 0161 555 0178", 0.8),
        ("me", OLD, 0.7),
    ]
    # asked for the past, the other way round; in the past tense, as ranked
    newest = [labelled("me", NEW, 0.9), labelled("me", OLD, 0.7)]
    assert notes(current_first("what was my old number", newest))[0] == ("me", OLD, 0.9)
    assert current_first("what number did I have in 2024", hits) == hits


def test_a_note_that_is_over_stays_when_nothing_replaced_it():
    # "do I do yoga": the note that says it stopped is the answer
    hits = [labelled("me", "Tried yoga in 2022 but stopped", 0.9), labelled("me", "Runs 5 km on Sundays", 0.8)]
    assert current_first("do I do yoga", hits) == hits


def test_a_change_about_something_else_moves_nothing():
    # an entity with many notes (the user, a speaker of a long conversation) says many changes, of other things
    hits = [labelled("me", OLD, 0.9), labelled("me", "Vegetarian since 2024", 0.8)]
    assert current_first("what's my phone number", hits) == hits
    hits = [labelled("me", "Lives in Chorlton", 0.9), labelled("me", "New job at the BBC since May", 0.8)]
    assert current_first("where do I live now", hits) == hits


def test_a_question_about_now_reads_the_change_first():
    hits = [labelled("Mortgage", PAYMENT, 0.9), labelled("Mortgage", RAISED, 0.8)]
    assert notes(current_first("how much is the mortgage each month now", hits))[0] == ("Mortgage", RAISED, 0.9)
    assert notes(current_first("how much is the mortgage these days", hits))[0] == ("Mortgage", RAISED, 0.9)
    assert current_first("how much is the mortgage each month", hits) == hits  # the question does not ask


def test_entities_and_memories_are_apart_and_name_matches_keep_their_place():
    hits = [
        labelled("me", None, 0.95),
        labelled("me", OLD, 0.9, "personal"),
        labelled("me", NEW, 0.7, "work"),  # another memory's "me"
    ]
    assert current_first("what's my phone number", hits) == hits


def test_a_search_answers_with_the_current_phone_number(tmp_path):
    # the transformer reads the old note nearer "what's my phone number" (0.69 against 0.51 in Kwabena's memory)
    store = store_with(
        tmp_path,
        "me",
        [
            Entity("user", "person", ["Name: Kwabena Mensah", OLD, "Lives in Chorlton", NEW, "Allergic to penicillin"]),
            Entity("Callum Reid", "person", ["Mobile 07700 900555", "Head of Science at a school"]),
            Entity("Dr. Patel", "person", ["Surgery phone 0161 555 0178"]),
        ],
        [Relation("user", "Callum Reid", "married to")],
    )
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "what's my phone number", "hybrid", 10, None)
    own = [h.hit.observation for h in outcome.hits if h.hit.entity.name == "user"]
    assert own[:2] == [NEW, OLD], notes(outcome.hits)
    outcome = searcher.search([Target("m", store)], "what was my old phone number", "hybrid", 10, None)
    assert next(h.hit.observation for h in outcome.hits if h.hit.entity.name == "user") == OLD, notes(outcome.hits)


def test_without_the_reranker_a_smaller_limit_still_answers_with_the_current_note(tmp_path):
    """The static ranking cuts its pool at the limit: the note that replaced one that is over may rank just below
    it, and must still take its place (limit 1 answers as limit 10 does), adding no hit."""
    filler = [f"Practises the {w} on Sundays" for w in ("piano", "violin", "cello", "flute", "drums", "harp")]
    store = store_with(
        tmp_path, "me", [Entity("user", "person", ["Name: Kwabena Mensah", OLD, *filler, NEW, "Lives in Chorlton"])]
    )
    searcher = Searcher(slot(tmp_path, "none"))
    wide = searcher.search([Target("m", store)], "what's my phone number", "hybrid", 10, None).hits
    assert wide[0].hit.observation == NEW, notes(wide)
    for limit in (1, 2, 3):
        narrow = searcher.search([Target("m", store)], "what's my phone number", "hybrid", limit, None).hits
        assert narrow[0].hit.observation == NEW, (limit, notes(narrow))
        assert len(narrow) <= limit and {h.hit.observation for h in narrow} <= {h.hit.observation for h in wide}


def test_a_candidate_past_the_limit_only_replaces_a_note_that_is_over(tmp_path):
    """The candidates read past the limit are there for a note that replaced one that is over: asked for the past,
    a note below the cut-off that is over ("old number") does not push out the answer ("Works at Globex")."""
    filler = [f"Practises the {w} on Sundays" for w in ("piano", "violin", "cello", "flute", "drums", "harp")]
    own = ["Name: Kwabena Mensah", "Works at Globex as a data engineer", "Works in the Globex office in Salford"]
    store = store_with(tmp_path, "me", [Entity("user", "person", [*own, *filler, OLD, "Used to swim at the baths"])])
    searcher = Searcher(slot(tmp_path, "none"))
    question = "what was my previous job"
    every = notes(searcher.search([Target("m", store)], question, "hybrid", None, None).hits)
    assert len(every) < 10
    for limit in (10, len(every)):
        assert notes(searcher.search([Target("m", store)], question, "hybrid", limit, None).hits) == every, limit
    # the current project's memory in a search of every context: its hits are copies, their scores grown
    every = notes(searcher.search([Target("m", store, 0.05)], question, "hybrid", None, None).hits)
    assert notes(searcher.search([Target("m", store, 0.05)], question, "hybrid", 10, None).hits) == every
    # nor, asked what holds now, a change below the limit a note that is not over
    hits = [labelled("Mortgage", PAYMENT, 0.9), labelled("Mortgage", RAISED, 0.8)]
    assert current_first("how much is the mortgage each month now", hits, returned=1) == hits
    hits = [labelled("me", OLD, 0.9), labelled("me", NEW, 0.7)]
    assert notes(current_first("what's my phone number", hits, returned=1))[0] == ("me", NEW, 0.9)


def test_only_the_first_candidates_decide_in_a_preferred_memory_too(tmp_path, monkeypatch):
    """The current project's hits are copies (their scores grown): the candidates past the limit are still told
    apart, and only the first `limit` reach the cut-off."""
    filler = [f"Practises the {w} on Sundays" for w in ("piano", "violin", "cello", "flute", "drums", "harp")]
    store = store_with(
        tmp_path, "me", [Entity("user", "person", ["Name: Kwabena Mensah", OLD, *filler, NEW, "Lives in Chorlton"])]
    )
    judged = []
    monkeypatch.setattr(searcher_module, "relevant", lambda hits: judged.append(len(hits)) or list(hits))
    searcher = Searcher(slot(tmp_path, "none"))
    for boost in (0.0, 0.05):
        narrow = searcher.search([Target("m", store, boost)], "what's my phone number", "hybrid", 2, None).hits
        assert judged.pop() <= 2, boost
        assert narrow[0].hit.observation == NEW, (boost, notes(narrow))


def test_the_replacement_takes_the_place_of_the_note_that_is_over():
    # the entity's notes between them were ranked below both: "Lives in Chorlton" does not answer first
    hits = [labelled("me", OLD, 0.9), labelled("me", "Lives in Chorlton", 0.8), labelled("me", NEW, 0.7)]
    assert notes(current_first("what's my phone number", hits)) == [
        ("me", NEW, 0.9),
        ("me", OLD, 0.8),
        ("me", "Lives in Chorlton", 0.7),
    ]


def test_a_shared_date_is_not_the_same_thing():
    gym = "New gym membership since Feb 2025"
    hits = [labelled("me", OLD, 0.9), labelled("me", gym, 0.8), labelled("me", NEW, 0.7)]
    assert [h.hit.observation for h in current_first("what's my phone number", hits)] == [NEW, OLD, gym]


def test_a_name_that_starts_with_new_says_no_change():
    assert not says_change("Went to New York with the Acme team")
    assert says_change("new laptop from work")
    hits = [
        labelled("me", "Works at Acme as an engineer", 0.9),
        labelled("me", "Went to New York with the Acme team", 0.8),
    ]
    assert current_first("where do I work now", hits) == hits


def test_a_note_that_says_what_holds_now_after_what_is_over_is_current():
    moved = "Previously at Acme, now works at Globex"
    assert not is_over(moved)
    assert is_over("Old gym membership, stopped since May 2024")
    hits = [labelled("me", moved, 0.9), labelled("me", "Globex gave me a new laptop", 0.8)]
    assert current_first("where do I work", hits) == hits
    hits = [labelled("me", "Globex gave me a new laptop", 0.9), labelled("me", moved, 0.8)]
    assert notes(current_first("where did I work previously", hits))[0] == ("me", moved, 0.9)


def test_words_that_say_who_do_not_ask_for_the_past():
    previous = "Previous address: Flat 3, 22 Wilbraham Road"
    new = "New address since May: 12 Oak Road"
    hits = [labelled("Sarah", new, 0.9), labelled("Sarah", "Phone 0770 111", 0.85), labelled("Sarah", previous, 0.8)]
    for question in [
        "what's my ex's address",
        "what's my ex-wife's address",
        "what's the address of my former boss",
        "where does my old teacher live",
        "which address is used for the council tax",
    ]:
        assert current_first(question, hits) == hits, question
    assert notes(current_first("what was my ex's previous address", hits))[0] == ("Sarah", previous, 0.9)
    assert notes(current_first("what address did she used to have", hits))[0] == ("Sarah", previous, 0.9)


@pytest.mark.parametrize(
    "note",
    [
        "Ended up moving to Leeds in 2023",
        "Stopped by the bakery on Friday",
        "Is used to early starts",
        "Got used to it",
    ],
)
def test_a_visit_an_outcome_a_habit_are_not_over(note):
    assert not is_over(note)
    assert is_over("Stopped in March 2024")
    hits = [labelled("Tom", note, 0.9), labelled("Tom", "Now works at the Leeds office in the new building", 0.8)]
    assert current_first("where does Tom live", hits) == hits


@pytest.mark.anyio
async def test_over_stdio_the_current_number_comes_first_with_or_without_the_reranker(tmp_path):
    from helpers import connect, ok, server_env

    people = [
        {"name": "user", "entityType": "person", "observations": ["Name: Kwabena Mensah", OLD, "Lives in Chorlton"]},
        {"name": "Dr. Patel", "entityType": "person", "observations": ["Surgery phone 0161 555 0178"]},
    ]
    for args in ((), ("--reranker", "none")):
        memory = tmp_path / f"memory{len(args)}.jsonl"
        async with connect(server_env(MEMORY_FILE_PATH=memory), args=args) as session:
            await ok(session, "create_entities", entities=people)
            await ok(session, "add_observations", observations=[{"entityName": "user", "contents": [NEW]}])
            found = await ok(session, "search_nodes", query="what's my phone number", limit=3)
            mine = [m["observation"] for m in found["matches"] if m["entityName"] == "user"]
            assert mine[0] == NEW, (args, found["matches"])
