#!/usr/bin/env python3
"""Write ``memory_server/occupations.txt``: the English nouns that name an occupation, read from WordNet 3.0.

A note that answers "what does my husband do" says a job ("Midwife, Rotunda Hospital", "Retired pharmacist"),
and neither embedding model tells a job from any other note (README, Search). Job titles are a large class of
words, not a list to keep by hand, so they are read once from WordNet (Princeton's lexical database; its licence,
which asks to travel with every copy, heads the file) and shipped as plain text: nothing of WordNet is needed
at run time.

Which nouns (deterministic): a lemma whose first noun sense (WordNet orders senses by frequency) is not a named
person and falls under one of ROOTS (a worker, a professional, a businessperson, a scientist, ...). "nurse" and
"fisherman" are in; "hand" (first a body part), "mother" and "friend" are out. A few common titles the rule misses
are added by hand (EXTRA: "solicitor", first a petitioner; "barista", not in WordNet 3.0).

What it needs (BUILD TIME ONLY, never a runtime dependency): `pip install nltk` and WordNet's database files,
either from nltk's downloader (`python -m nltk.downloader wordnet`) or, with no network but Debian's packages,
`apt-get install wordnet-base wordnet-sense-index`, whose files nltk reads from a copy given as ``--wordnet``
(nltk wants the ``lexnames`` file too, which this script writes from the lexnames(5WN) manual page):

    python scripts/build_occupations.py [--wordnet /usr/share/wordnet]
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "memory_server" / "occupations.txt"
ROOTS = (
    "worker.n.01",
    "professional.n.01",
    "businessperson.n.01",
    "scientist.n.01",
    "engineer.n.01",
    "creator.n.02",
    "expert.n.01",
    "leader.n.01",
    "scholar.n.01",
    "employee.n.01",
    "serviceman.n.01",
    "performer.n.01",
    "programmer.n.01",
    "writer.n.01",
    "official.n.01",
    "enrollee.n.01",
)
# Common titles the rule above misses: WordNet lacks them ("barista", "postdoc", "garda") or their first sense is no
# job ("solicitor": a petitioner; "builder": a creator of a business; "cleaner": a cleansing agent). "driver" is left
# out ("Driver's licence expires 2027"): its compounds say the job.
EXTRA = (
    "apprentice",
    "athlete",
    "auditor",
    "banker",
    "barber",
    "barista",
    "builder",
    "bus driver",
    "carer",
    "cashier",
    "childminder",
    "chauffeur",
    "courier",
    "delivery driver",
    "detective",
    "dj",
    "fireman",
    "firefighter",
    "footballer",
    "founder",
    "garda",
    "headteacher",
    "homemaker",
    "housewife",
    "influencer",
    "interpreter",
    "joiner",
    "lorry driver",
    "nanny",
    "physio",
    "podcaster",
    "policeman",
    "policewoman",
    "postdoc",
    "postwoman",
    "principal",  # first the money lent; a school's head second
    "referee",
    "reporter",
    "retiree",
    "solicitor",
    "taxi driver",
    "tattooist",
    "trainee",
    "translator",
    "truck driver",
    "youtuber",
)
LEXNAMES_PAGE = Path("/usr/share/man/man5/lexnames.5WN.gz")
PARTS_OF_SPEECH = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}  # the numbers nltk's lexnames file gives them
HEADER = """\
# Nouns that name an occupation, one per line, lower case, written by scripts/build_occupations.py from WordNet 3.0:
# a lemma whose first noun sense falls under {roots};
# and the common titles that rule misses (EXTRA there).
#
# WordNet's licence, which asks to appear on all copies:
#
# This software and database is being provided to you, the LICENSEE, by Princeton University under the following
# license. By obtaining, using and/or copying this software and database, you agree that you have read, understood,
# and will comply with these terms and conditions.:
#
# Permission to use, copy, modify and distribute this software and database and its documentation for any purpose
# and without fee or royalty is hereby granted, provided that you agree to comply with the following copyright
# notice and statements, including the disclaimer, and that the same appear on ALL copies of the software, database
# and documentation, including modifications that you make for internal use or for distribution.
#
# WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.
#
# THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES,
# EXPRESS OR IMPLIED. BY WAY OF EXAMPLE, BUT NOT LIMITATION, PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR
# WARRANTIES OF MERCHANT- ABILITY OR FITNESS FOR ANY PARTICULAR PURPOSE OR THAT THE USE OF THE LICENSED SOFTWARE,
# DATABASE OR DOCUMENTATION WILL NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS, TRADEMARKS OR OTHER RIGHTS.
#
# The name of Princeton University or Princeton may not be used in advertising or publicity pertaining to
# distribution of the software and/or database. Title to copyright in this software, database and any associated
# documentation shall at all times remain with Princeton University and LICENSEE agrees to preserve same.
"""


def occupations(wordnet) -> list[str]:
    roots = {wordnet.synset(name) for name in ROOTS}
    found = set()
    for lemma in wordnet.all_lemma_names("n"):
        senses = wordnet.synsets(lemma, "n")
        first = senses[0] if senses else None
        if first is None or first.instance_hypernyms():
            continue
        if any(roots.intersection(path) for path in first.hypernym_paths()):
            found.add(lemma.replace("_", " ").lower())
    return sorted(found | set(EXTRA))


def wordnet_from(folder: Path, work: Path):
    """nltk's reader over a copy of `folder` (nltk reads corpora only under its data path), with `lexnames`."""
    corpus = work / "corpora" / "wordnet"
    shutil.copytree(folder, corpus)
    if not (corpus / "lexnames").exists():
        lines = []
        with gzip.open(LEXNAMES_PAGE, "rt") as page:
            manual = page.read().splitlines()
        for line in manual:
            match = re.match(r"^(\d\d)\t(\S+)", line)
            if match:
                number, name = match.groups()
                lines.append(f"{number}\t{name}\t{PARTS_OF_SPEECH[name.split('.')[0]]}\n")
        (corpus / "lexnames").write_text("".join(lines))
    os.environ["NLTK_DATA"] = str(work)
    import nltk

    nltk.data.path.insert(0, str(work))
    from nltk.corpus import wordnet

    return wordnet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordnet", type=Path, help="a folder of WordNet 3.0's database files (default: nltk's)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        if options.wordnet:
            wordnet = wordnet_from(options.wordnet, Path(work))
        else:
            from nltk.corpus import wordnet
        words = occupations(wordnet)
    OUT.write_text(HEADER.format(roots=", ".join(ROOTS)) + "".join(f"{word}\n" for word in words))
    print(f"{len(words)} occupations -> {OUT}")


if __name__ == "__main__":
    main()
