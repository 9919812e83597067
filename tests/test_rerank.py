"""The transformer's second reading of a search (memory_server.rerank): where the model is found, what it changes
in a ranking, that it reads no text twice, and that search goes on without it."""

import json
import threading
from dataclasses import replace

import pytest

from memory_server import rerank, vector_cache
from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity, Relation
from memory_server.rerank import RerankerSlot, find_model
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore
from memory_server.vector_cache import text_keys

AOIFE = [
    Entity(
        "default_user",
        "person",
        [
            "Name: Aoife Gallagher",
            "Pescatarian",
            "Flat white, oat milk",
            "2018 Nissan Leaf",
            "Sligo Rovers fan",
            "Backend engineer, Tallyo",
        ],
    ),
    Entity("Cian Brennan", "person", ["Midwife, Rotunda Hospital", "12h night shifts, 3 on 4 off"]),
    Entity("Eileen Walsh", "person", ["Neighbour at no. 16", "Husband Paddy in a nursing home"]),
    Entity("Meal plan", "note", ["Mon stir fry, Tue fish, Wed pasta, Thu leftovers, Fri pizza"]),
    Entity("Harbour Coffee", "customer", ["Pilot for instant payouts"]),
    Entity("Butcher", "shop", ["Moore's on Dorset St, closed Mondays"]),
] + [
    Entity(f"Ticket {n}", "ticket", [f"Refactor the {part} module before the audit"])
    for n, part in enumerate(
        ["billing", "ledger", "payouts", "invoices", "auth", "webhooks", "exports", "reports", "search", "admin"] * 4
    )
]
AOIFE_RELATIONS = [Relation("default_user", "Cian Brennan", "married to")]


def store_with(tmp_path, name, entities, relations=()):
    store = GraphStore(tmp_path / f"{name}.jsonl")
    store.mutate(
        lambda g: (
            g.create_entities(Entity(e.name, e.entity_type, list(e.observations)) for e in entities),
            g.create_relations(relations),
        )
    )
    return store


def slot(tmp_path, reranker: str | None = None) -> EmbedderSlot:
    return EmbedderSlot(cache_dir=tmp_path / "vectors", reranker=RerankerSlot(reranker, tmp_path / "vectors"))


def answers(outcome, count=3):
    return [(h.hit.entity.name, h.hit.observation) for h in outcome.hits[:count]]


def test_the_model_is_found_where_it_is_installed_or_named(tmp_path):
    folder, note = find_model(None)
    assert folder is not None and (folder / "model.safetensors").is_file(), note
    assert find_model("none") == (None, None)
    missing, why = find_model(str(tmp_path / "nowhere"))
    assert missing is None and "nowhere" in why and "model.safetensors" in why
    assert find_model(str(folder)) == (folder, None)


def test_questions_sharing_no_word_with_the_fact_find_it(tmp_path):
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    for question, answer in (
        ("what car do I drive", ("default_user", "2018 Nissan Leaf")),  # the static ranking alone finds nothing
        ("which football team do I support", ("default_user", "Sligo Rovers fan")),
        # the user's notes are read as the user would say them: "I am: Backend engineer, Tallyo"
        ("what's my job", ("default_user", "Backend engineer, Tallyo")),
        ("where do I work", ("default_user", "Backend engineer, Tallyo")),
        ("what does my husband do for a living", ("Cian Brennan", "Midwife, Rotunda Hospital")),
    ):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert answer in answers(outcome), (question, answers(outcome, 10))
        assert "re-ranked by all-MiniLM-L6-v2" in outcome.model


def test_a_note_of_someone_named_by_role_answers_a_question_about_the_note_itself(tmp_path):
    # Read as "my class Terminale ...: Bac blanc (mock exam) ..." alone, the class's note fell under three notes
    # sharing a word ("Karine Blanc"); a question not about the user is read against the note as it is too.
    entities = [
        Entity("Olivier Marchetti", "person", ["Physics teacher, mostly Terminales", "Lives in Lyon"]),
        Entity("Terminale spécialité physique-chimie", "class", [BAC_BLANC, "28 students, Tuesday mornings"]),
        Entity("Rachid Amrani", "person", ["Shares the bac blanc marking with Olivier and harmonises grades"]),
        Entity("Karine Blanc", "person", ["Mobile 06 40 88 26 13", "Co-coach of the youth group at the club"]),
        Entity("Lucas Marchetti", "person", ["Wants a 50cc scooter for his 16th birthday: no until after the bac"]),
        *AOIFE[6:30],
    ]
    relations = [
        Relation("Olivier Marchetti", "Terminale spécialité physique-chimie", "teaches"),
        Relation("Lucas Marchetti", "Olivier Marchetti", "child of"),
    ]
    store = store_with(tmp_path, "olivier", entities, relations)
    outcome = Searcher(slot(tmp_path)).search([Target("m", store)], "when is the bac blanc", "hybrid", 10, None)
    assert ("Terminale spécialité physique-chimie", BAC_BLANC) in answers(outcome), answers(outcome, 10)


BAC_BLANC = "Bac blanc (mock exam) for Terminales: 19/01/2027, 08:00-11:30, gymnasium"


def test_a_mark_the_transformer_reads_as_unrelated_does_not_lift_its_note(tmp_path):
    # "my vet" of a vet reached the pets, and their notes with a number were marked as the answer; the transformer
    # reads them far from the question (cosines 0.25 to 0.38 against 0.73), so the marks are not trusted.
    entities = [
        Entity(
            "Kenji Arakawa", "person", ["Small-animal vet at Agata Animal Hospital since 2014", VET_LICENCE, "Kendo"]
        ),
        Entity(
            "Kinako",
            "dog",
            [
                "Shiba inu, female, born 2019",
                "Dog registration Matsumoto no. 2020-1184; rabies shot every April at our clinic",
                "Came to us in 2020 as a surrender case at the clinic",
            ],
        ),
        Entity("Mugi", "cat", ["Brown tabby, male, neutered; found as a kitten by Hana in June 2020"]),
        Entity("Shinano Vet Supply", "supplier", ["The clinic account number is AG-0517"]),
        *AOIFE[6:30],
    ]
    relations = [Relation("Kenji Arakawa", "Kinako", "owns"), Relation("Kenji Arakawa", "Mugi", "owns")]
    store = store_with(tmp_path, "kenji", entities, relations)
    outcome = Searcher(slot(tmp_path)).search([Target("m", store)], "what's my vet licence number", "hybrid", 10, None)
    assert answers(outcome, 1) == [("Kenji Arakawa", VET_LICENCE)], answers(outcome, 10)


VET_LICENCE = "His national veterinary licence is number 28451, issued in 2006"


def test_a_question_about_someones_job_puts_the_job_first(tmp_path):
    # The transformer reads "12h night shifts" nearer "what does my husband do" than "Midwife, Rotunda Hospital";
    # the note of the person asked about (by role or by name) that says a job (answers.Shape.OCCUPATION) is marked.
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    for question in ("what does my husband do", "what's my husband's job", "what does Cian do for a living"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert answers(outcome, 1) == [("Cian Brennan", "Midwife, Rotunda Hospital")], answers(outcome, 10)


def test_a_question_about_the_users_job_puts_their_job_first(tmp_path):
    # The user's own notes are marked only for a job: another's old job and a note with the word "job" rank over
    # "Backend engineer, Tallyo" for "what's my job" without the mark.
    extra = ["Office Tue-Thu, WFH Mon/Fri", "Job share idea: 4 days a week from 2026", "Career coach sessions, monthly"]
    user = Entity("default_user", "person", [*AOIFE[0].observations, *extra])
    old_job = Entity("Old job", "note", ["Worked at Workday as a Java developer from 2016 to 2022"])
    store = store_with(tmp_path, "aoife", [user, old_job, *AOIFE[1:]], AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    for question in ("what's my job", "whats my job", "what do I do for a living"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert answers(outcome, 1) == [("default_user", "Backend engineer, Tallyo")], answers(outcome, 10)
    for question in ("what's my current job", "what's my job title"):  # words beside "job" that still ask it
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert ("default_user", "Backend engineer, Tallyo") in marked(outcome), (question, marked(outcome))


def test_a_relatives_date_of_birth_answers_their_birthday_over_others_birthdays(tmp_path):
    # The transformer reads a sister's "Birthday 27 October 1980" nearer "when is my mum's birthday" than the
    # mother's "Born 12 January 1957": the mark of the mother's date (ANSWER_BONUS) must outweigh it.
    entities = [
        Entity("user", "person", ["Name: Kwabena Mensah", "Sound engineer", "Lives in Chorlton"]),
        Entity("Akosua Mensah", "person", ["Mum; lives in Accra", "Born 12 January 1957", "Retired headteacher"]),
        Entity("Efua Boateng", "person", ["Older sister", "Birthday 27 October 1980", "Nana's birthday 9 April"]),
        Entity("Femi Adeyemi", "person", ["Best mate since uni", "Birthday 3 June"]),
        Entity("Yaw Mensah", "person", ["Younger brother", "Birthday 2 June 1988"]),
        *AOIFE[3:],
    ]
    relations = [
        Relation("user", "Akosua Mensah", "son_of"),
        Relation("user", "Efua Boateng", "brother_of"),
        Relation("user", "Yaw Mensah", "brother_of"),
    ]
    store = store_with(tmp_path, "kwabena", entities, relations)
    searcher = Searcher(slot(tmp_path))
    for question in ("when is my mum's birthday", "when is my mother's birthday"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert answers(outcome, 1) == [("Akosua Mensah", "Born 12 January 1957")], answers(outcome, 10)


def test_the_users_date_of_birth_answers_how_old_they_are(tmp_path):
    # Of the user's many dated notes only the one saying a birth is marked: the transformer reads "b. 3 Aug 1990,
    # Sligo" as unrelated to "how old am I", and others' birthdays nearer "when's my birthday".
    entities = [
        Entity("default_user", "person", ["b. 3 Aug 1990, Sligo", "Joined Tallyo Mar 2022", "T1D since 2001"]),
        Entity("Cian Brennan", "person", ["Husband", "Birthday 19 Nov 1988"]),
        Entity("Niamh Gallagher", "person", ["Sister", "Birthday 2 April 1993"]),
        *AOIFE[3:],
    ]
    relations = [
        Relation("default_user", "Cian Brennan", "married to"),
        Relation("default_user", "Niamh Gallagher", "sister of"),
    ]
    searcher = Searcher(slot(tmp_path))
    store = store_with(tmp_path, "aoife", entities, relations)
    for question in ("how old am I", "when's my birthday", "when was I born"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert marked(outcome) == [("default_user", "b. 3 Aug 1990, Sligo")], (question, marked(outcome))
        assert answers(outcome, 1) == [("default_user", "b. 3 Aug 1990, Sligo")], (question, answers(outcome, 10))
    outcome = searcher.search([Target("m", store)], "when is my sister's birthday", "hybrid", 10, None)
    assert ("default_user", "b. 3 Aug 1990, Sligo") not in marked(outcome)


FAMILY = [
    Entity("Rónán Brennan", "person", ["Postdoc in seismology at DIAS", "Owns a dog named Bran"]),
    Entity("Will Byrne", "person", ["Electrician, self-employed", "Neighbour at no. 12"]),
    Entity("Work", "topic", ["Product manager at Google until 2021"]),
    Entity("Seán Gallagher", "person", ["Retired the old Corolla in 2022", "Firefighter, Dublin Fire Brigade"]),
]
FAMILY_RELATIONS = [
    Relation("Rónán Brennan", "Cian Brennan", "brother of"),
    Relation("Seán Gallagher", "default_user", "father of"),
]


def marked(outcome):
    return [(h.hit.entity.name, h.hit.observation) for h in outcome.hits if h.hit.shaped]


def test_the_job_marked_is_of_the_one_asked_about(tmp_path):
    # "my husband's brother", "Cian's brother" ask about Rónán, not Cian: no mark rather than the husband's job; the
    # words that ask for a job name no one ("Work" is a topic): "what do I do for work" asks the user's.
    store = store_with(tmp_path, "aoife", AOIFE + FAMILY, AOIFE_RELATIONS + FAMILY_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "what does my husband's brother do", "hybrid", 10, None)
    assert marked(outcome) == [], marked(outcome)
    # through Cian by name, the brother is found (user.through_named): his job is marked, not Cian's
    outcome = searcher.search([Target("m", store)], "what does Cian's brother do", "hybrid", 10, None)
    assert marked(outcome) == [("Rónán Brennan", "Postdoc in seismology at DIAS")], marked(outcome)
    outcome = searcher.search([Target("m", store)], "what do I do for work", "hybrid", 10, None)
    assert marked(outcome) == [("default_user", "Backend engineer, Tallyo")], marked(outcome)
    # the "I" of a clause about another: the user's job is not the answer
    for question in ("what does the guy I met at the gym do", "what job does the woman I sat next to have"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert ("default_user", "Backend engineer, Tallyo") not in marked(outcome), (question, marked(outcome))
    outcome = searcher.search([Target("m", store)], "what does Rónán do", "hybrid", 10, None)
    assert answers(outcome, 1) == [("Rónán Brennan", "Postdoc in seismology at DIAS")], answers(outcome, 10)
    # The static cut-off left it out (no word in common) and its cosine is no near one's: marked, it counts.
    outcome = searcher.search([Target("m", store)], "what does my dad do for a living", "hybrid", 10, None)
    assert answers(outcome, 1) == [("Seán Gallagher", "Firefighter, Dublin Fire Brigade")], answers(outcome, 10)


def test_the_number_of_the_one_a_question_names_answers_it(tmp_path):
    # A bare phone number shares nothing with "what's the plumber's number" (the transformer reads it far from the
    # question): the plumber is found by his other note, by name, or by role, and his phone note answers.
    entities = [
        *AOIFE,
        Entity("Joe Kinsella", "person", ["Plumber, boiler service", "087 445 2210"]),
        Entity("Yaw Mensah", "person", ["Sound engineer in Accra", "WhatsApp +233 20 555 0134", "Born 2 June 1988"]),
        Entity("Ama Mensah", "person", ["Yaw's wife", "Mobile 024 555 0199"]),
        Entity("Máire Brennan", "person", ["Cian's mother, b. 1958", "Widowed since 2015", "Mobile 086 555 0142"]),
        Entity("Neighbours", "topic", ["Eileen at no. 16 has a key", "Bins: 01 555 0100 for a missed collection"]),
    ]
    relations = [*AOIFE_RELATIONS, Relation("Cian Brennan", "Máire Brennan", "son of")]
    store = store_with(tmp_path, "aoife", entities, relations)
    searcher = Searcher(slot(tmp_path))
    for question, answer in [
        ("what's the plumber's number", ("Joe Kinsella", "087 445 2210")),
        ("what's Yaw Mensah's phone number", ("Yaw Mensah", "WhatsApp +233 20 555 0134")),
        ("what's my mother-in-law's number", ("Máire Brennan", "Mobile 086 555 0142")),  # not her dated notes
    ]:
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert answers(outcome, 1) == [answer], (question, answers(outcome, 10))
        assert marked(outcome) == [answer], (question, marked(outcome))  # not Ama Mensah's


def test_how_much_a_phone_costs_asks_no_ones_number(tmp_path):
    # "how much is my phone bill" asked a phone number, and "bill" named Bill Evans: his number was marked, first
    entities = [
        *AOIFE,
        Entity("Bill Evans", "person", ["Accountant, does the tax return", "Phone 09 444 1234"]),
        Entity("Phone plan", "note", ["Bill Mobile, 35 euro a month, due on the 20th", "Unlimited data"]),
    ]
    store = store_with(tmp_path, "aoife", entities, AOIFE_RELATIONS)
    outcome = Searcher(slot(tmp_path)).search([Target("m", store)], "how much is my phone bill", "hybrid", 10, None)
    assert ("Bill Evans", "Phone 09 444 1234") not in marked(outcome), marked(outcome)
    assert answers(outcome, 1) == [("Phone plan", "Bill Mobile, 35 euro a month, due on the 20th")], answers(outcome)


def test_a_number_plate_is_a_cars_not_the_users_phone_number(tmp_path):
    # "what's my number plate" asked a number: the user's phone notes were lifted, and the car's note ("reg CA
    # 778-215"), in an entity no role or name reaches, never read. A plate is asked of the memory's vehicles.
    entities = [
        *AOIFE,
        Entity("Phones", "topic", ["Cell 082 555 0143 (old number, stopped 2025-09-30)", "New cell 072 555 3190"]),
        Entity(
            "Car",
            "topic",
            [
                "First car: 2008 Toyota Tazz, bought 2010, sold 2016",
                "Current car since 2025-07-15: 2022 Suzuki Swift 1.2 GL, red, reg CA 778-215",
                "Service every 15,000 km at Suzuki Tokai",
                "Tyres: Bridgestone Ecopia 175/65 R14",
            ],
        ),
        Entity("Documents", "topic", ["Registration number PMD 0041187 with the council", "ID number in the safe"]),
    ]
    store = store_with(tmp_path, "aoife", entities, AOIFE_RELATIONS)
    outcome = Searcher(slot(tmp_path)).search([Target("m", store)], "what's my number plate", "hybrid", 10, None)
    plate = ("Car", "Current car since 2025-07-15: 2022 Suzuki Swift 1.2 GL, red, reg CA 778-215")
    assert answers(outcome, 1) == [plate], answers(outcome, 10)
    assert marked(outcome) == [plate], marked(outcome)  # not the tyres' size, nor another registration


def test_our_wedding_anniversary_is_the_date_the_spouses_note_says_they_married(tmp_path):
    # "Married 18 August 2016" is the husband's note and reads far from "when's our wedding anniversary": birthdays
    # read nearer. The notes of the user and the spouse that say the wedding, with a date, answer it.
    entities = [
        *AOIFE,
        Entity("Callum Reid", "person", ["Birthday 22 September 1983", "Married 18 August 2016, Manchester Town Hall"]),
        Entity("Pat Higgins", "person", ["Birthday 14 February (card from the kids every year)"]),
        Entity("Amina Benali", "person", ["First marriage to Thomas Roche (2010-2018)"]),
        Entity("Niamh's wedding", "event", ["Melbourne, 21 Feb 2026"]),
    ]
    relations = [Relation("default_user", "Callum Reid", "married to")]
    store = store_with(tmp_path, "m", entities, relations)
    searcher = Searcher(slot(tmp_path))
    for question in ("when's our wedding anniversary", "what's the date of our wedding anniversary"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        wedding = ("Callum Reid", "Married 18 August 2016, Manchester Town Hall")
        assert answers(outcome, 1) == [wedding], (question, answers(outcome, 10))
        assert marked(outcome) == [wedding], marked(outcome)
    # another's wedding is no one's anniversary
    outcome = searcher.search([Target("m", store)], "when is Niamh's wedding", "hybrid", 10, None)
    assert marked(outcome) == [], marked(outcome)


def test_the_birth_of_the_one_a_question_names_answers_their_birthday(tmp_path):
    # Noah's birth is said in a note describing him ("Amina's son, born ..."), which reads far from "when is Noah's
    # birthday"; others' birthdays, and his dated notes, read nearer. By name, by a nickname his notes give, in
    # shorthand.
    entities = [
        *AOIFE,
        Entity(
            "Noah Roche",
            "person",
            [
                "Amina's son, Olivier's stepson, born 30/04/2016",
                "Bedtime 20:30 on school nights",
                "Judo on Saturdays at 10:00; orange belt since June 2026",
                "Goes by Noé at school",
            ],
        ),
        Entity("Inès Roche", "person", ["13th birthday on 12/11/2026: sleepover with four friends", "Born 2013"]),
        Entity("Samia Bouzid", "person", ["Birthday 09/06/1980, same day as Olivier", "Friend from the lycée"]),
        Entity("Thomas Roche", "person", ["Has Inès and Noah for Christmas 2026 (24/12 to 31/12)"]),
    ]
    store = store_with(tmp_path, "olivier", entities, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    for question in ("when is Noah's birthday", "whens noahs bday", "how old is Noah Roche"):
        outcome = searcher.search([Target("m", store)], question, "hybrid", 10, None)
        assert answers(outcome, 1) == [("Noah Roche", "Amina's son, Olivier's stepson, born 30/04/2016")], (
            question,
            answers(outcome, 10),
        )


def test_where_someone_was_born_is_not_marked_by_their_birth_date(tmp_path):
    entities = [*AOIFE, Entity("Vili Taufa", "person", ["Born 3 May 2015", "Born in Middlemore Hospital, Auckland"])]
    store = store_with(tmp_path, "aoife", entities, AOIFE_RELATIONS)
    outcome = Searcher(slot(tmp_path)).search([Target("m", store)], "where was Vili born", "hybrid", 10, None)
    assert marked(outcome) == [], marked(outcome)
    assert ("Vili Taufa", "Born in Middlemore Hospital, Auckland") in answers(outcome, 2), answers(outcome)


def test_a_list_of_numbers_a_question_names_is_not_read_whole():
    # "the school" named the Contacts list by its note "St Mary's school office": all its 3000 numbers were added to
    # the transformer's pool (40 s), and any of them was marked as the answer
    from memory_server.graph import KnowledgeGraph
    from memory_server.marks import named_answers
    from memory_server.search import GraphIndex

    graph = KnowledgeGraph()
    numbers = [f"Contact {n}: 01 555 {n:04d}" for n in range(300)]
    graph.create_entities([Entity("Contacts", "list", ["St Mary's school office", *numbers])])
    index = GraphIndex(graph)
    office = next(d for d, said in enumerate(index.observations) if said == "St Mary's school office")
    assert named_answers(index, "what's the number for the school", [office], None) == []


def test_the_note_the_transformer_reads_nearest_is_not_buried_for_sharing_no_word():
    # "when's my next tick jab": the answer shares no word with it, so the static ranking gave it nothing, and its
    # static half put it under every long note that shared a word, though the transformer read it nearest
    from memory_server.hits import Hit, LabelledHit

    words = "one two three four five six seven eight nine ten eleven twelve"
    pool = [("Ticks", f"next tick check {words}", 0.8, 0.30), ("Ticks", f"tick card {words}", 0.7, 0.28)]
    pool += [("Gotland", f"fieldwork note {n} {words}", 0.6, 0.20 + n / 100) for n in range(3)]
    pool += [("Other", f"unrelated note {n} {words}", 0.0, 0.10) for n in range(3)]
    pool += [("TBE vaccine", f"dose 3 due May 2026 {words}", 0.0, 0.45)]
    hits = [
        LabelledHit(Hit(Entity(name, "note", []), said, static, static, static * 4, n, cosine), "m", ())
        for n, (name, said, static, cosine) in enumerate(pool)
    ]
    order = [labelled.hit.entity.name for labelled in rerank.reordered(hits)]
    assert order.index("TBE vaccine") < 3, order


def test_nonsense_still_returns_nothing(tmp_path):
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    for query in ("asdf qwerty zxcv", "purple monkey dishwasher"):
        outcome = searcher.search([Target("m", store)], query, "hybrid", 10, None)
        assert outcome.hits == [], (query, answers(outcome, 10))
        assert "nothing relevant" in outcome.note


def test_a_relevant_fact_elsewhere_beats_the_projects_irrelevant_ones(tmp_path):
    personal = store_with(tmp_path, "personal", AOIFE, AOIFE_RELATIONS)
    project = store_with(
        tmp_path,
        "project",
        [
            Entity("Testing", "convention", ["make test (go test ./... -race)", "CI runs on GitHub Actions"]),
            Entity("Deploy", "convention", ["Rollback: helm rollback ledgerline"]),
        ],
    )
    searcher = Searcher(slot(tmp_path))
    targets = [Target("personal", personal), Target("project", project, boost=0.15)]
    outcome = searcher.search(targets, "which football team do I support", "hybrid", 10, None)
    assert (outcome.hits[0].label, outcome.hits[0].hit.observation) == ("personal", "Sligo Rovers fan")
    own = searcher.search(targets, "how do I run the tests", "hybrid", 10, None)
    assert (own.hits[0].label, own.hits[0].hit.observation) == ("project", "make test (go test ./... -race)")


NEAR_MISSES = [
    Entity("Tiago Ferreira", "person", ["Architect; visits Berlin once a month", "Cousin of Cian"]),
    Entity("Car insurance", "note", ["Renewed every year in March with Aviva"]),
    Entity("Wall calendar", "note", ["Bin day on the kitchen wall calendar: green bin Tuesdays"]),
    Entity("Garden", "note", ["The back wall needs repointing this year", "Leaves fall into the gutter every autumn"]),
    Entity("Berlin trip", "event", ["Flights to Berlin booked for the Christmas market, 12 December"]),
]


def test_hits_that_only_share_a_word_with_the_question_are_left_out(tmp_path):
    """The static cut-off keeps notes sharing a word with the question ("year", "fall"); those the transformer
    reads as unrelated, or far below the best hit past the first three, cost the agent's context for nothing."""
    store = store_with(tmp_path, "aoife", AOIFE + NEAR_MISSES, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "what year did the Berlin Wall fall", "hybrid", 10, None)
    cosines = [h.hit.cosine for h in outcome.hits]
    assert outcome.hits and min(cosines) >= rerank.LEAST_COSINE, answers(outcome, 10)
    assert all(c >= max(cosines) - rerank.COSINE_GAP for c in cosines[rerank.FIRST_MATCHES :])
    assert ("Car insurance", "Renewed every year in March with Aviva") not in answers(outcome, 10)
    both = searcher.search([Target("m", store)], "how often do I visit Berlin", "hybrid", 10, None)
    assert set(answers(both)) >= {
        ("Tiago Ferreira", "Architect; visits Berlin once a month"),
        ("Berlin trip", "Flights to Berlin booked for the Christmas market, 12 December"),
    }


def test_no_text_is_read_twice_across_restarts(tmp_path, monkeypatch):
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    first = slot(tmp_path)
    searcher = Searcher(first)
    searcher.search([Target("m", store)], "which football team do I support", "hybrid", 10, None)
    first.reranker.get().wait(searcher.holds(store))  # the whole memory read, in the background
    again = slot(tmp_path)  # a new process, as far as the caches can tell
    reader = again.reranker.get()
    read: list[str] = []
    encode = reader.encoder.encode
    monkeypatch.setattr(reader.encoder, "encode", lambda texts: read.extend(texts) or encode(texts))
    outcome = Searcher(again).search([Target("m", store)], "what car do I drive", "hybrid", 10, None)
    assert ("default_user", "2018 Nissan Leaf") in answers(outcome)
    assert read == ["what car do I drive"]  # the documents' vectors came from the cache


def test_the_cache_forgets_the_vectors_of_edited_text(tmp_path, monkeypatch):
    """A server that starts on a memory edited since reads it whole again, and rewrites a cache that holds many
    more vectors than the memory has texts: only the texts it holds now stay, and none is read again after."""
    monkeypatch.setattr(vector_cache, "PRUNE_SLACK", 0)  # a cache this small would otherwise wait for 1,024 more
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)

    def read_whole(query: str) -> tuple[Searcher, RerankerSlot]:
        embeddings = slot(tmp_path)  # a new process, as far as the caches can tell
        searcher = Searcher(embeddings)
        searcher.search([Target("m", store)], query, "hybrid", 10, None)
        embeddings.reranker.get().wait(searcher.holds(store))
        return searcher, embeddings.reranker

    read_whole("which football team do I support")
    cache = next((tmp_path / "vectors").glob("transformer-*/*.vectors"))
    before = cache.stat().st_size
    store.mutate(lambda g: g.delete_entities([e.name for e in AOIFE[6:]]))  # the tickets: 40 texts gone
    read_whole("what car do I drive")
    assert cache.stat().st_size < before / 4  # 13 records of 53 stay
    _, again = read_whole("what car do I drive")
    read: list[str] = []
    encode = again.reader.encoder.encode
    monkeypatch.setattr(again.reader.encoder, "encode", lambda texts: read.extend(texts) or encode(texts))
    outcome = Searcher(EmbedderSlot(cache_dir=tmp_path / "vectors", reranker=again)).search(
        [Target("m", store)], "which football team do I support", "hybrid", 10, None
    )
    assert ("default_user", "Sligo Rovers fan") in answers(outcome) and read == ["which football team do I support"]


def test_a_fact_added_while_the_memory_is_read_whole_keeps_its_vector(tmp_path, monkeypatch):
    """The background reading of a memory prunes the vectors it holds when done: a fact added (and read by a
    search) while it read keeps its vector, in memory and on disk, and is not read again after a restart."""
    monkeypatch.setattr(vector_cache, "PRUNE_SLACK", 0)  # a cache this small would otherwise wait for 1,024 more
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    first = slot(tmp_path)
    searcher = Searcher(first)
    searcher.search([Target("m", store)], "which football team do I support", "hybrid", 10, None)
    first.reranker.get().wait(searcher.holds(store))  # 53 texts in the cache
    store.mutate(lambda g: g.delete_entities([e.name for e in AOIFE[6:]]))  # the tickets: 40 texts gone
    reading, edited = threading.Event(), threading.Event()
    vectors = rerank.Reader._vectors

    def read_slowly(reader, memory, texts, budget):  # the memory changes while the background reads it
        if budget is None:  # the background reading's batches
            reading.set()
            assert edited.wait(60)
        return vectors(reader, memory, texts, budget)

    monkeypatch.setattr(rerank.Reader, "_vectors", read_slowly)
    embeddings = slot(tmp_path)  # a new process
    searcher = Searcher(embeddings)
    searcher.search([Target("m", store)], "which football team do I support", "hybrid", 10, None)
    assert reading.wait(60)
    added = "Has a springer spaniel called Bran"
    store.mutate(lambda g: g.add_observations([("default_user", [added])]))
    outcome = searcher.search([Target("m", store)], "do I have a dog", "hybrid", 10, None)  # reads the new fact
    assert answers(outcome, 1) == [("default_user", added)]
    edited.set()
    reader = embeddings.reranker.get()
    index = searcher.holds(store)
    reader.wait(index)
    document = index.observations.index(added)
    assert text_keys([rerank._text(index, document)])[0] in reader._memories[index].vectors
    restart = slot(tmp_path)
    encoder = restart.reranker.get().encoder
    read: list[str] = []
    encode = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts: read.extend(texts) or encode(texts))
    outcome = Searcher(restart).search([Target("m", store)], "do I have a dog", "hybrid", 10, None)
    assert answers(outcome, 1) == [("default_user", added)] and read == ["do I have a dog"]


def test_a_fact_added_later_is_read_at_the_next_search(tmp_path):
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    assert searcher.search([Target("m", store)], "do I have a dog", "hybrid", 10, None).hits == []
    store.mutate(lambda g: g.add_observations([("default_user", ["Has a springer spaniel called Bran"])]))
    outcome = searcher.search([Target("m", store)], "do I have a dog", "hybrid", 10, None)
    assert answers(outcome, 1) == [("default_user", "Has a springer spaniel called Bran")]


@pytest.mark.parametrize("setting", ["none", "/nowhere/at/all"])
def test_without_the_reranker_search_ranks_as_before(tmp_path, setting):
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    embeddings = slot(tmp_path, setting)
    outcome = Searcher(embeddings).search([Target("m", store)], "where do I watch football", "hybrid", 10, None)
    assert outcome.model == "bundled:all-MiniLM-L6-v2-static-256"
    assert embeddings.reranker.reader is None
    assert (embeddings.reranker.note is None) == (setting == "none")


@pytest.mark.parametrize(
    "change, said",
    [
        ({"num_attention_heads": 7}, "not a multiple of 7 heads"),
        ({"model_type": "roberta"}, "no BERT model"),
    ],
)
def test_a_broken_model_folder_leaves_the_static_ranking_and_says_why(tmp_path, change, said):
    real, _ = find_model(None)
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(real / name)
    config = json.loads((real / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, **change}), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 100000}', encoding="utf-8")
    embeddings = slot(tmp_path, str(folder))
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    outcome = Searcher(embeddings).search([Target("m", store)], "Sligo Rovers", "hybrid", 10, None)
    assert outcome.model == "bundled:all-MiniLM-L6-v2-static-256" and outcome.hits
    assert embeddings.reranker.reader is None and said in embeddings.reranker.note


def test_a_text_longer_than_the_models_positions_is_cut_to_them(tmp_path):
    real, _ = find_model(None)
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        (folder / name).symlink_to(real / name)
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 100000}', encoding="utf-8")
    store = store_with(tmp_path, "long", [Entity("Essay", "note", ["words about the garden " * 900])])
    outcome = Searcher(slot(tmp_path, str(folder))).search([Target("m", store)], "garden", "hybrid", 10, None)
    assert "re-ranked by" in outcome.model and outcome.hits[0].hit.entity.name == "Essay"


@pytest.mark.anyio
async def test_over_stdio_the_server_reranks_when_the_model_is_installed(tmp_path):
    from helpers import connect, ok, server_env

    people = [{"name": e.name, "entityType": e.entity_type, "observations": list(e.observations)} for e in AOIFE]
    for args, reranked in (((), True), (("--reranker", "none"), False)):
        memory = tmp_path / f"{reranked}.jsonl"
        async with connect(server_env(MEMORY_FILE_PATH=memory), args=args) as session:
            await ok(session, "create_entities", entities=people)
            found = await ok(session, "search_nodes", query="what car do I drive")
            assert ("re-ranked by" in found["search"]["model"]) == reranked
            if reranked:
                assert (found["matches"][0]["entityName"], found["matches"][0]["observation"]) == (
                    "default_user",
                    "2018 Nissan Leaf",
                )


def test_a_first_person_question_nothing_matched_gets_the_users_nearest_notes_and_says_so(tmp_path):
    """ "what are my hobbies" shares no word with "Plays the tin whistle in a céilí band", and no cosine stands out
    in the memory: the question is about the user, so their own notes nearest it are shown, a few, marked weak."""
    user = Entity("default_user", "person", [*AOIFE[0].observations, "Plays the tin whistle in a ceili band"])
    store = store_with(tmp_path, "aoife", [user, *AOIFE[1:]], AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "what are my hobbies", "hybrid", 10, None)
    assert ("default_user", "Plays the tin whistle in a ceili band") in answers(outcome), answers(outcome, 10)
    assert len(outcome.hits) <= rerank.FIRST_MATCHES and all(h.hit.entity.name == "default_user" for h in outcome.hits)
    assert "nearest" in outcome.note and "weak" in outcome.note
    for query in ("asdf qwerty zxcv", "what is my asdf qwerty"):  # nonsense, about the user or not: nothing
        nonsense = searcher.search([Target("m", store)], query, "hybrid", 10, None)
        assert nonsense.hits == [], (query, answers(nonsense, 10))


def test_a_match_the_transformer_finds_alone_is_not_called_weak_evidence(tmp_path):
    """ "what car do I drive": "2018 Nissan Leaf" is found by the transformer's cosine alone (no word in common, so
    the static cut-off gave it no relevance); it is a match, not one of the nearest notes shown for want of one."""
    store = store_with(tmp_path, "aoife", AOIFE, AOIFE_RELATIONS)
    searcher = Searcher(slot(tmp_path))
    found_alone = (
        ("what car do I drive", "2018 Nissan Leaf"),
        ("which football team do I support", "Sligo Rovers fan"),
    )
    for query, answer in found_alone:
        outcome = searcher.search([Target("m", store)], query, "hybrid", 10, None)
        assert answers(outcome, 1) == [("default_user", answer)], answers(outcome, 10)
        assert "weak" not in (outcome.note or ""), outcome.note


def test_a_note_with_the_shape_of_answer_asked_for_goes_first_of_two_alike():
    # "what time is pottery": of two notes read alike, the one holding a time answers it; the mark is the question's
    # shape (answers.py), whoever's note it is
    from memory_server.hits import Hit, LabelledHit

    pool = [
        ("Pottery class", "Glaze firings on Saturdays; pick up pieces within two weeks", False),
        ("Pottery class", "Wednesdays 19h to 21h30", True),
    ]
    hits = [
        LabelledHit(Hit(Entity(name, "class", []), said, 0.7, 0.7, 2.8, n, 0.5, fits=fits), "m", ())
        for n, (name, said, fits) in enumerate(pool)
    ]
    order = [labelled.hit.observation for labelled in rerank.reordered(hits)]
    assert order[0] == "Wednesdays 19h to 21h30", order
    unmarked = [LabelledHit(replace(h.hit, fits=False), "m", ()) for h in hits]
    order = [labelled.hit.observation for labelled in rerank.reordered(unmarked)]
    assert order[0] == pool[0][1], order  # the order given, else


def test_the_notes_with_the_shape_a_question_asks_for_are_marked_as_fitting(tmp_path):
    entities = [
        Entity(
            "Pottery class", "class", ["Glaze firings on Saturdays; pick up pieces later", "Wednesdays 19h to 21h30"]
        )
    ]
    store = store_with(tmp_path, "pottery", entities, [])
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "what time is pottery", "hybrid", 10, None)
    fitting = [h.hit.observation for h in outcome.hits if h.hit.fits]
    assert fitting == ["Wednesdays 19h to 21h30"], fitting
    # a place is a proper name, which most notes hold: no mark
    outcome = searcher.search([Target("m", store)], "where is pottery", "hybrid", 10, None)
    assert not any(h.hit.fits for h in outcome.hits), [h.hit.observation for h in outcome.hits]


def test_a_thing_of_a_relative_asked_for_marks_none_of_their_dates(tmp_path):
    # "when is my mom's next eye shot" asks the shot's date: her birthday and the year she moved in are dates of hers,
    # not answers (they were marked, and lifted over the clinic's "next Dec 3")
    entities = [
        Entity("default_user", "person", ["Name: Rosa Delgado", "Owns a bakery"]),
        Entity("Carmen Delgado", "person", ["Birthday December 8", "Moved in with us in 2023 after a fall"]),
        Entity("Retina Associates", "clinic", ["Mom's eye clinic, Dr. Kapoor; injections every 6 weeks, next Dec 3"]),
    ]
    store = store_with(tmp_path, "rosa", entities, [Relation("default_user", "Carmen Delgado", "child of")])
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "when is my mom's next eye shot", "hybrid", 10, None)
    assert not [hit for hit in marked(outcome) if hit[0] == "Carmen Delgado"], marked(outcome)
    outcome = searcher.search([Target("m", store)], "when is my mom's birthday", "hybrid", 10, None)
    assert marked(outcome) == [("Carmen Delgado", "Birthday December 8")], marked(outcome)


def test_how_to_reach_someone_marks_their_number_and_not_a_places(tmp_path):
    entities = [
        Entity("default_user", "person", ["Name: Fernanda Ribeiro", "Translator"]),
        Entity("Léa Gagnon", "person", ["Mathieu's daughter", "Her own cell: 514-555-0319"]),
        Entity("Karine Lefebvre", "person", ["Léa's mother; separated from Mathieu in 2015", "Cell 514-555-0447"]),
        Entity("Glenmore campsite", "place", ["Take the N11 south, exit 12, then 3 km", "Booking line 0404 45678"]),
    ]
    store = store_with(tmp_path, "fernanda", entities, [])
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "how do I reach Léa's mom", "hybrid", 10, None)
    assert marked(outcome) == [("Karine Lefebvre", "Cell 514-555-0447")], marked(outcome)  # hers, not Léa's
    outcome = searcher.search([Target("m", store)], "how do I reach the campsite", "hybrid", 10, None)
    assert marked(outcome) == [], marked(outcome)
    assert answers(outcome, 1) == [("Glenmore campsite", "Take the N11 south, exit 12, then 3 km")], answers(outcome, 5)


def test_a_boy_asked_through_his_parent_is_the_one_marked(tmp_path):
    # "how old is Rafa's boy" asks of Theo: Rafael's own birth is not the answer, though "Rafa" names him
    entities = [
        Entity("default_user", "person", ["Name: Fernanda Ribeiro"]),
        Entity("Rafael Ribeiro", "person", ['Younger brother, "Rafa"', "Born 3 May 1985"]),
        Entity("Theo Ribeiro", "person", ["Born 11 January 2018", "Plays futsal"]),
    ]
    relations = [
        Relation("Rafael Ribeiro", "Theo Ribeiro", "parent of"),
        Relation("default_user", "Rafael Ribeiro", "sister of"),
    ]
    store = store_with(tmp_path, "fernanda", entities, relations)
    searcher = Searcher(slot(tmp_path))
    outcome = searcher.search([Target("m", store)], "how old is Rafa's boy", "hybrid", 10, None)
    assert marked(outcome) == [("Theo Ribeiro", "Born 11 January 2018")], marked(outcome)
    assert ("Rafael Ribeiro", "Born 3 May 1985") not in answers(outcome, 3), answers(outcome, 5)


def test_a_bare_figure_keeps_its_mark_whatever_script_its_word_is_in():
    # the transformer cannot read a phone number near a question; a sentence without spaces is many words
    for note in ("Cell 514-555-0447", "Mobile 06 20 47 85 12", "電話 090-4478-1123", "Tel. 0263-33-4721"):
        assert rerank._bare(note), note
    for note in ("Dog registration no. 2020-1184", "Born 12 January 1957", "她的生日是一月十二日", "獣医師免許 28451"):
        assert not rerank._bare(note), note
