"""Retrieval quality on natural questions about a personal + work + project memory (bench/personal_memory/).

Fourteen personas, each a memory in three contexts (personal, work, and a project) among a few hundred distractor
entities, written as an assistant would have stored it, with questions asked as a user would ("where do I live",
"who is my boss", "how do I run the tests"), each with the observations that answer it, or none:
- `hannah` (the dev set): Hannah Brandt's memory, in full sentences about "Hannah Brandt";
- `aoife` (dev, round 3): Aoife Gallagher's, in the official prompt's style: terse notes about "default_user" (and
  "Aoife Gallagher" at work), family and home held in relations; written before the ranker was run on it;
- `dimitra` (dev, round 4): Dimitra Papadaki's (a PhD student whose partner lives abroad; her project is an R and
  Snakemake pipeline), styles mixed: terse notes about "default_user", full sentences about "Dimitra Papadaki" at
  work, dated notes, near-duplicates about other people; written blind, by someone who had not seen the ranker;
- `rosa` (dev, round 4, written blind with dimitra): Rosa Delgado's (a bakery owner in Tucson; her project is the
  bakery's Astro website), the user named by her first name only ("Rosa") at home and "Rosa Delgado" at work, US
  formats, relatives with near-duplicate birthdays, medications and documents;
- `tom` (held out): Tom Wójcik's, in terse notes about "default_user" (and "Tom Wójcik" at work), some facts only
  in relations. Written before the ranker changes it measures; run it to report, never to tune;
- `priya` (written blind in round 6): Priya Raghunathan's (an ICU nurse in Toronto, separated, a daughter on alternate
  weeks, her father in a retirement home, a tenant in the basement; her project is ShiftSwap, a Rails app), terse
  notes about "default_user" and full sentences about "Priya Raghunathan" at work, dated notes, facts in relations,
  near-duplicates (her ex's new family, two managers, two hospitals, five cars); run it to report, like tom;
- `kwabena` (dev, round 10, written blind): Kwabena Mensah's (a freelance sound engineer and part-time lecturer in
  Manchester, a husband and two children, his mother in Accra, a loft conversion, Crohn's disease; his project is
  stemcheck, a Python CLI), terse notes about "user" at home and full sentences about "Kwabena Mensah" at work, topic
  entities ("Health", "Car", "Finances 2025"), dated notes, updated facts, near-duplicate birthdays, doctors and cars;
- `margit` (held out, written blind in round 10): Margit Halvorsen's (a retired maths teacher in Bergen, widowed, living
  with her partner, five grandchildren, a hytte and two boats; her "work" is treasurer of a residents' association,
  her project a Hugo family-history site her grandson set up), full sentences about "Margit Halvorsen" and some
  notes about "Margit", topic entities, facts in relations, dated and updated notes, Norwegian formats and words,
  near-duplicate birthdays, doctors, boats, cars and addresses; run it to report, like tom and priya.
- `sione` (dev, round 12, written blind): Sione Taufa's (a civil engineer and site manager in Auckland, a wife, a son
  and a baby daughter, his parents in Tonga, church choir and youth roster, touch rugby, gout; his project is
  lotu-ledger, a Flask app for the church's roster and fundraising ledger), terse notes about "default_user" at home
  and full sentences about "Sione Taufa" at work, topic entities ("Health", "Car", "Mortgage", "Church"), facts in
  relations, dated and updated notes (phone, address, a dose, a mortgage rate, a line manager), NZ formats and Tongan
  words, near-duplicate birthdays, doctors, cars, phone numbers and managers.
- `olivier` (dev, round 13, written blind): Olivier Marchetti's (a chemistry teacher in a Lyon lycée and part-time
  youth cycling coach, divorced and remarried, a son on alternate weeks and two step-children, his mother with
  Alzheimer's in an EHPAD, a dog, a rented flat and a caravan, type 1 diabetes, learning the piano; his project is
  sortie, a Django app for the cycling club), terse third-person notes about "Olivier Marchetti" (his full name, in
  all three contexts) with some full sentences naming him, topic entities ("Health", "Flat", "Caravan", "Money",
  "Piano"), facts only in relations (wife, dog, GP), dated and updated notes (phone, insulin dose, sensor, rent, a
  caravan decision, his school), French formats and words, near-duplicate birthdays, doctors, cars and phone numbers.
- `lindiwe` (dev, round 14, written blind): Lindiwe Khumalo's (an ALS paramedic in Cape Town on a platoon rota of two
  days, two nights and four off, moved from one EMS station to another, so two station managers; divorced, a son on
  alternate weeks and a toddler with her, her mother in frail care, a tenant in the garden cottage, a dog,
  hypothyroidism; first aid courses on her off days; her project is rooster, a Go service that merges the rota and the
  custody weeks into a calendar feed), terse notes about "default_user" at home and full sentences about "Lindiwe
  Khumalo" at work, topic entities ("Health", "Car", "House", "Money", "Kids' school", "Documents"), facts in
  relations, dated and updated notes (phone, dose, car, rent, care fees, handover), South African formats and words.
- `fernanda` (dev, round 15, written blind): Fernanda Ribeiro's (a freelance translator in Montréal, a common-law
  partner and his daughter half the week, her mother in Brazil, migraines, Québec sales taxes; her project is alinhar,
  a Rust tool aligning old translations), terse notes about "default_user" at home and full sentences at work, French
  and Portuguese words, nicknames, typos; questions mostly paraphrased.
- `kenji` (dev, round 16, written blind): Kenji Arakawa's (a small-animal vet in Matsumoto with two bosses and a
  monthly night shift elsewhere, a wife and two children, his parents' orchard and his in-laws in Nagoya, high blood
  pressure, kendo; his project is keiko-bot, a LINE bot for his dōjō), terse notes about "default_user" at home and
  full sentences about "Kenji Arakawa" at work, topic entities, facts in relations, dated and updated notes, Japanese
  formats and words, near-duplicate birthdays, doctors, cars, managers and patients.
- `njeri` (dev, round 16, written blind, first measured on that round's final code): Njeri Mwangi's (an agronomist
  running variety trials for a Kenyan seed company, a husband, two children and a stepson, a house being built, her
  parents and her mother-in-law upcountry, anaemia; her project is mvua-alerts, a FastAPI service texting rain
  forecasts to a farmers' cooperative), terse notes about "default_user" at home and full sentences at work, KSh and
  Kenyan phone formats, Swahili, Kikuyu and Dholuo words, nicknames, five birthdays in one month.
Two setups:
- one context: the three memories merged into one file;
- three contexts: one file each, searched together from the project (as `context: "*"` does, same-project prior on).
For each it prints hit@1, hit@3 and MRR (first answer in the top 10) over the answerable questions, how many matches
came back, and, for the questions the memory cannot answer, how many came back on average and how many came back
empty; and the characters of a result (the larger of its text and its structured content, as the agent gets it).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/personal_memory.py
        [--persona hannah|aoife|dimitra|rosa|kwabena|sione|olivier|lindiwe|fernanda|kenji|njeri|tom|priya|margit] [--misses]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memory_server import present
from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity, Relation
from memory_server.rerank import RerankerSlot
from memory_server.searcher import Searcher, Target
from memory_server.server import PROJECT_BOOST
from memory_server.store import GraphStore

DATA = Path(__file__).resolve().parent / "personal_memory"
ANY = "*"  # an answer "Entity :: *": any hit of the entity (a fact held in its relations, shown with it)
CONTEXTS = ("personal", "work", "project")  # the last is the project the search is run from
LIMIT = 10


@dataclass
class Question:
    split: str
    text: str
    answers: set[tuple[str, str]]  # (entity name, observation or ANY)


def read_memory(path: Path) -> tuple[list[Entity], list[Relation]]:
    """Entities and relations from the bench's plain format: 'Name | type', '- observation', '> relation | target'."""
    entities: list[Entity] = []
    relations: list[Relation] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("- "):
            entities[-1].observations.append(line[2:].strip())
        elif line.startswith("> "):
            relation_type, target = (part.strip() for part in line[2:].split("|"))
            relations.append(Relation(entities[-1].name, target, relation_type))
        else:
            name, entity_type = (part.strip() for part in line.split("|"))
            entities.append(Entity(name, entity_type, []))
    return entities, relations


def read_questions(folder: Path, memories: dict[str, tuple[list[Entity], list[Relation]]]) -> list[Question]:
    observations = {}
    for entities, _ in memories.values():
        for entity in entities:
            observations.setdefault(entity.name, []).extend(entity.observations)
    questions = []
    for line in (folder / "questions.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        split, text, answers = (part.strip() for part in line.split("|", 2))
        found: set[tuple[str, str]] = set()
        for answer in answers.split(";;") if answers != "-" else []:
            name, _, words = (part.strip() for part in answer.partition("::"))
            if words == ANY:
                if name not in observations:
                    raise ValueError(f"answer {answer!r} of {text!r} names no entity of the memory")
                found.add((name, ANY))
                continue
            matching = [o for o in observations.get(name, []) if words in o]
            if len(matching) != 1:
                raise ValueError(f"answer {answer!r} of {text!r} matches {len(matching)} observations, not one")
            found.add((name, matching[0]))
        questions.append(Question(split, text, found))
    return questions


def rename(memories, questions: list[Question], old: str, new: str) -> None:
    """Call the entity `old` `new` everywhere (its relations, the answers), keeping its old name as an observation:
    the memory an assistant writes when it follows the official prompt ("default_user", "Name: ...")."""
    for entities, relations in memories.values():
        for entity in entities:
            if entity.name == old:
                entity.name = new
                entity.observations.insert(0, f"Name: {old}")
        relations[:] = [
            Relation(new if r.source == old else r.source, new if r.target == old else r.target, r.relation_type)
            for r in relations
        ]
    for question in questions:
        question.answers = {(new if name == old else name, said) for name, said in question.answers}


def write_store(folder: Path, name: str, entities: list[Entity], relations: list[Relation]) -> GraphStore:
    store = GraphStore(folder / f"{name}.jsonl")
    merged: dict[str, Entity] = {}
    for entity in entities:  # one entity per name, as a single memory file holds it
        merged.setdefault(entity.name, Entity(entity.name, entity.entity_type, [])).observations.extend(
            entity.observations
        )
    store.mutate(lambda graph: (graph.create_entities(merged.values()), graph.create_relations(relations)))
    return store


def setups(folder: Path, memories, boost: float) -> dict[str, list[Target]]:
    every_entity = [e for entities, _ in memories.values() for e in entities]
    every_relation = [r for _, relations in memories.values() for r in relations]
    return {
        "one context": [Target("memory", write_store(folder, "memory", every_entity, every_relation))],
        "three contexts": [
            Target(name, write_store(folder, name, *memories[name]), boost if name == CONTEXTS[-1] else 0.0)
            for name in CONTEXTS
        ],
    }


def evaluate(searcher: Searcher, targets: list[Target], questions: list[Question], mode: str, misses: bool):
    first_ranks: list[int | None] = []
    empty_returned: list[int] = []
    returned: list[int] = []
    characters: list[int] = []
    for question in questions:
        outcome = searcher.search(targets, question.text, mode, LIMIT, None)
        found = [(h.hit.entity.name, h.hit.observation) for h in outcome.hits]
        structured, text = present.search_result(outcome)
        characters.append(max(len(text), len(json.dumps(structured, ensure_ascii=False))))
        if not question.answers:
            empty_returned.append(len(found))
            if misses and found:
                print(f"  [no answer] {question.text!r} returned {len(found)}: {found[0]}")
            continue
        returned.append(len(found))
        rank = next(
            (n for n, hit in enumerate(found, start=1) if hit in question.answers or (hit[0], ANY) in question.answers),
            None,
        )
        first_ranks.append(rank)
        if misses and (rank is None or rank > 3):
            shown = "; ".join(f"{name}: {text}" for name, text in found[:3])
            print(f"  [rank {rank}] {question.text!r} -> {shown}")
    return {
        "n": len(first_ranks),
        "hit@1": statistics.fmean(r is not None and r <= 1 for r in first_ranks),
        "hit@3": statistics.fmean(r is not None and r <= 3 for r in first_ranks),
        "MRR": statistics.fmean(1 / r if r else 0.0 for r in first_ranks),
        "returned": statistics.fmean(returned),
        "characters": statistics.fmean(characters),
        "none n": len(empty_returned),
        "none returned": statistics.fmean(empty_returned) if empty_returned else 0.0,
        "none empty": sum(n == 0 for n in empty_returned),
    }


def override(settings: list[str]) -> None:
    """Set constants of the ranking modules (e.g. ENTITY_POOL=0.3), to measure an idea before making it the default."""
    names = ("search", "rerank", "lexical", "user")
    modules = [importlib.import_module(f"memory_server.{name}") for name in names if settings]
    for setting in settings:
        name, _, value = setting.partition("=")
        module = next((m for m in modules if hasattr(m, name)), None)
        if module is None:
            raise SystemExit(f"no constant {name} in memory_server.search, .rerank, .lexical or .user")
        new = type(getattr(module, name))(value)
        # and wherever it was imported by name (searcher's RERANK_POOL): an override there alone changed nothing
        for other in [module, *_importers(module.__name__, name)]:
            setattr(other, name, new)
        print(f"set {module.__name__}.{name} = {getattr(module, name)}")


def _importers(source: str, name: str) -> list:
    """The loaded memory_server modules that import `name` from module `source` ("from ... import RERANK_POOL")."""
    found = []
    for other in [m for n, m in list(sys.modules.items()) if n.startswith("memory_server.")]:
        tree = ast.parse(Path(other.__file__).read_text(encoding="utf-8"))
        imports = (node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == source)
        if any(alias.name == name for node in imports for alias in node.names):
            found.append(other)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    personas = sorted(folder.name for folder in DATA.iterdir() if (folder / "questions.txt").is_file())
    parser.add_argument(
        "--persona", choices=personas, default="hannah", help="tom, priya and margit are held out; the others are dev"
    )
    parser.add_argument("--mode", default="hybrid", choices=("hybrid", "semantic"))
    parser.add_argument("--model", default=None, help="model2vec folder or hub id (default: the bundled model)")
    parser.add_argument("--misses", action="store_true", help="print the questions whose answer is not in the top 3")
    parser.add_argument("--reranker", default=None, help="transformer folder, or 'none' (default: the installed one)")
    parser.add_argument("--cache", type=Path, help="keep the vectors made here, for the next run (default: none)")
    parser.add_argument("--cold", action="store_true", help="do not wait for the re-ranker to read each memory whole")
    parser.add_argument("--boost", type=float, default=PROJECT_BOOST, help="the project's preference (three contexts)")
    parser.add_argument("--rename", metavar="OLD=NEW", help="rename an entity, e.g. the user to default_user")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a search constant")
    options = parser.parse_args(argv)
    override(options.set)
    folder = DATA / options.persona
    memories = {name: read_memory(folder / f"{name}.txt") for name in CONTEXTS}
    questions = read_questions(folder, memories)
    if options.rename:
        rename(memories, questions, *options.rename.split("="))
    slot = EmbedderSlot(options.model, options.cache)
    slot.reranker = RerankerSlot(options.reranker, options.cache)
    searcher = Searcher(slot)
    reader = slot.reranker.get()
    print(
        f"model: {slot.get()[0] and slot.get()[0].name}; re-ranker: {reader and reader.name} "
        f"{slot.reranker.note or ''}; persona: {options.persona}; mode: {options.mode}"
    )
    print(
        "| setup | questions | hit@1 | hit@3 | MRR | matches returned | no-answer questions: mean returned, empty "
        "| characters per result |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for setup, targets in setups(Path(scratch), memories, options.boost).items():
            if reader is not None and not options.cold:  # the steady state: each memory read whole once
                for target in targets:
                    searcher.search([target], "warm up", options.mode, LIMIT, None)
                    reader.wait(searcher.holds(target.store))
            if options.misses:
                print(f"{setup}:")
            m = evaluate(searcher, targets, questions, options.mode, options.misses)
            print(
                f"| {setup} | {m['n']} | {m['hit@1']:.3f} | {m['hit@3']:.3f} | {m['MRR']:.3f} | {m['returned']:.1f} "
                f"| {m['none returned']:.1f}, {m['none empty']}/{m['none n']} | {m['characters']:.0f} |"
            )


if __name__ == "__main__":
    main()
