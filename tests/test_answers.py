"""The shape of answer a question asks for, and notes that hold one."""

import pytest

from memory_server.answers import Shape, asked_shape, asks_own_wedding, has_shape, says_wedding


@pytest.mark.parametrize(
    ("question", "shape"),
    [
        ("how old am I", Shape.DATE),
        ("when's my birthday", Shape.DATE),
        ("When is choir?", Shape.DATE),
        ("what time does school finish", Shape.TIME),
        ("which day are the bins collected", Shape.TIME),
        ("where does my mother live", Shape.PLACE),
        ("how much does childcare cost", Shape.NUMBER),
        ("what's the plumber's number", Shape.PHONE),  # someone's number is their phone's
        ("whats mele's mobile", Shape.PHONE),
        ("what's the number for the GP surgery", Shape.PHONE),
        ("who's my contact at the foundation", None),  # a contact who is someone, not how to reach them
        ("how do I reach the campsite", None),  # the way there (the mark asks it of a person only: marks.py)
        ("what's my IRD number", Shape.NUMBER),
        ("what's my number plate", Shape.PLATE),
            ("wats the rego on my ute", Shape.PLATE),
            ("how much is the rego", Shape.NUMBER),
        ("what's the resource consent number for the bridge", Shape.NUMBER),
        ("how much is my phone bill", Shape.NUMBER),  # an amount, not a phone number
        ("how many mobile phones does the family have", Shape.NUMBER),
        ("who is my boss", None),
        ("what does my husband do", Shape.OCCUPATION),
        ("what did my dad do for work", Shape.OCCUPATION),
        ("what's my sister's job", Shape.OCCUPATION),
        ("what do I do if the boiler breaks", None),
        ("how much does my job pay", Shape.NUMBER),
    ],
)
def test_question_words_say_the_shape_of_the_answer(question, shape):
    assert asked_shape(question) is shape


def test_notes_hold_dates_times_places_and_numbers():
    assert has_shape("b. 3 Aug 1990, Sligo", Shape.DATE) and has_shape("since 2019", Shape.DATE)
    assert has_shape("Wed 7:30pm, St Peter's", Shape.TIME) and has_shape("Standup 9:45", Shape.TIME)
    assert not has_shape("b. 3 Aug 1990", Shape.TIME)
    assert has_shape("Strandhill Rd, Sligo", Shape.PLACE) and has_shape("Midwife, Rotunda Hospital", Shape.PLACE)
    assert has_shape("087 445 2210", Shape.NUMBER) and has_shape("€1,050/month", Shape.NUMBER)
    for phone in ("087 445 2210", "Mobile 06 20 47 85 12", "Phone (09) 255 0110", "WhatsApp +233 20 555 0134"):
        assert has_shape(phone, Shape.PHONE), phone
    for other in ("Married 2010-2018", "2025-08-14: refixed at 4.89%", "Born 22/10/1949", "Salary 33,400 SEK",
                  "Practice 10.30-12.00", "Version 1.6.0", "uppmax2025-2-187", "€1,050/month"):  # fmt: skip
        assert not has_shape(other, Shape.PHONE), other
    # dates written day first, with dots or dashes, and years from and to, spaced
    for date in ("Born 22.10.1949", "Geboren 22-10-1949", "Married 1998 - 2004", "Lived in Lyon 2010 \u2013 2015"):
        assert not has_shape(date, Shape.PHONE), date
    assert not any(has_shape(amount, Shape.PHONE) for amount in ("Sold for \u20ac1 250 000", "Prix 1 250 000 \u20ac"))
    assert has_shape("Mobile 06.12.34.56.78", Shape.PHONE) and has_shape("Tel 087-123-4567", Shape.PHONE)
    for plate in ("211-D-4471", "Skoda Octavia, grey, reg MA19 KXP", "rego NBK217", "Plate EZ-915-QB", "CA 112-340"):
        assert has_shape(plate, Shape.PLATE), plate
    for other in ("Invoice INV-2026-004", "Lab B111", "2.0 TDI", "Tyres 225/55 R18", "Mon: TG1 10:05-12:00",
                  "Mobile 087 445 2210", "Born 2 June 1987", "Version 1.6.0", "U15/U17 road group"):  # fmt: skip
        assert not has_shape(other, Shape.PLATE), other
    # Names of months and days count capitalised only: a verb or a noun is not a date.
    assert not has_shape("I may go out in the sun", Shape.DATE)
    assert not any(has_shape("Hates coriander", shape) for shape in Shape)


def test_notes_that_say_a_job():
    for note in (
        "Midwife, Rotunda Hospital",
        "ICU nurse, The Alfred",
        "Retired primary teacher",
        "Was a produce broker",
        "Public defender, felony unit",
        "Works as an architect",
        "Runs a small bookshop",
        "Owns Delgado Auto Body in South Tucson",
        "Senior data engineers at Brightwave",  # a plural is stemmed to the title
        "Promoted to lead developer",  # a job one moved to, not another's
        "Switched to data scientist",
    ):
        assert has_shape(note, Shape.OCCUPATION), note
    # Family, friends and habits are no job ("hand" is first a body part in WordNet, "mother" no occupation).
    for note in (
        "Hates coriander",
        "Best friend since UCD",
        "Mother of two",
        "Broke her hand skiing",
        "Runs 5 km",
        "4 days a week",
        "Runs training for new analysts",
    ):
        assert not has_shape(note, Shape.OCCUPATION), note


def test_common_titles_that_wordnet_reads_otherwise_say_a_job():
    # WordNet's first sense of "solicitor" is a petitioner, of "builder" a creator of a business; "barista" and
    # "postdoc" it lacks: scripts/build_occupations.py adds the common ones.
    for note in (
        "Solicitor, family law",
        "Barista at Two Boys Brew",
        "Postdoc in seismology at DIAS",
        "Firefighter, Dublin Fire Brigade",
        "Bus driver",
        "Garda in Sligo",
        "Apprentice electrician",
        "Deputy principal at Kōwhai Grove School",  # first the money lent
    ):
        assert has_shape(note, Shape.OCCUPATION), note


def test_a_title_someone_else_holds_or_a_verb_says_no_job():
    # A title after "about", or after "of"/"to"/"with" and an article, is another person's; a plural title that
    # opens the note before an article is a verb ("Cooks a roast"); "retired" before an article retires a thing.
    for note in (
        "Watched a documentary about pilots",
        "Married to a doctor",
        "Friend of the baker",
        "Cooks a roast every Sunday",
        "Retired the old Corolla in 2022",
        "Driver's licence expires 2027",
        "Owns a dog named Bran",
        "Runs the Phoenix Park parkrun most Saturdays",
    ):
        assert not has_shape(note, Shape.OCCUPATION), note
    for note in (
        "Retired in 2019",
        "Retired from the Garda",
        "Nurses at St James's",
        "Promoted to manager in 2023",
        "Teacher at a school in Cork",
        "Owns a small bakery in Tucson",
    ):
        assert has_shape(note, Shape.OCCUPATION), note


@pytest.mark.parametrize(
    ("question", "shape"),
    [
        ("what's my wife's line of work", Shape.OCCUPATION),
        ("what does my son do on Saturdays", None),
        ("what did my dad do to his knee", None),
        ("why does the windows CI job keep failing", None),
        ("what job do I need to finish", None),
        ("what job does Cian do", Shape.OCCUPATION),
        ("what's my current job", Shape.OCCUPATION),
        ("is that her day job", Shape.OCCUPATION),
        ("when did I start my new job", Shape.DATE),
        ("why does the current CI job fail", None),
    ],
)
def test_other_ways_to_ask_about_a_job(question, shape):
    assert asked_shape(question) is shape


def test_questions_about_the_users_own_birth_and_notes_that_say_one():
    from memory_server.answers import asks_own_birth, says_birth

    assert all(
        map(asks_own_birth, ["how old am I", "when's my birthday", "when was I born", "what's my date of birth"])
    )
    assert not any(map(asks_own_birth, ["how old is my son", "when is my son's birthday", "when was Vili born"]))
    assert not any(map(asks_own_birth, ["where's my birth certificate", "what's my birth cert number"]))
    assert all(map(says_birth, ["Born 9 April 1989", "b. 3 Aug 1990, Sligo", "Birthday 12 May", "DOB 1990-08-03"]))
    assert not any(map(says_birth, ["NZ citizen since 2008; still Tongan by birth", "Stillborn calf", "Bob. 3 apples"]))
    # the user's notes about another's birth: a relative's, one named with 's
    assert not any(map(says_birth, ["Mum's birthday 3 May", "Daughter Ana born 2019", "Cian's bday 19 Nov"]))
    # a note describing its entity first says its own birth after a comma; a birthday with no date says none
    assert all(map(says_birth, ["Amina's son, Olivier's stepson, born 30/04/2016", "Mum; born 1957", "Birthday 12/05"]))
    assert not says_birth("Wants a 50cc scooter for his 16th birthday: the answer is no")
    # the user's notes naming a relative, then their birth after a comma: the relative's ("how old am I" is not 6)
    assert not any(
        map(says_birth, ["Daughter Ana, born 12 June 2019", "Son Vili (born 2015)", "Wife Mele, b. 9 Jul 1987"])
    )


def test_questions_about_anyones_birth():
    from memory_server.answers import asks_birth

    assert all(
        map(asks_birth, ["when is Noah's birthday", "how old is my son", "whens noahs bday", "when was Vili born"])
    )
    assert not any(map(asks_birth, ["where's my birth certificate", "what did Noah get for Christmas"]))
    # where someone was born is a place: "Born 3 May 2015" does not answer it
    assert not any(map(asks_birth, ["where was Vili born", "which hospital was Noah born in"]))


def test_a_wedding_asked_and_said():
    asked = ["when's our wedding anniversary", "when did we get married", "how long have I been married"]
    asked += ["what's the date of our wedding anniversary", "when did my husband and I get married"]
    asked += ["when did my ex and I get married", "how long was I married to my ex-husband"]  # the ex's is ours too
    for question in asked:
        assert asks_own_wedding(question), question
    others = ["when is Niamh's wedding", "whose wedding am I going to in September", "when is my brother getting wed"]
    for question in [*others, "which restaurant did we go to for our anniversary", "when is my sister getting married"]:
        assert not asks_own_wedding(question), question
    for note in ("Married 18 August 2016, Manchester Town Hall", "Ex-husband; married 2014-12-06, separated 2022",
                 "Olivier married Amina on 21/08/2021", "Wedding anniversary is on 20 June"):  # fmt: skip
        assert says_wedding(note), note
    for note in ("Niamh's wedding 21 Feb 2026", "Married to Mandla Zulu", "First marriage to Thomas Roche (2010-2018)"):
        assert not says_wedding(note), note
