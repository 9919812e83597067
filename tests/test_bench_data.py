"""The personal-memory bench's data (bench/personal_memory/): every persona parses, every answer key names exactly
one observation of an entity the memory holds, and every relation joins entities the memory holds. A typo in a key
would otherwise count as a miss of the ranker, and nobody would see it."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "personal_memory.py"
spec = importlib.util.spec_from_file_location("personal_memory_bench", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # its dataclasses look their module up there
spec.loader.exec_module(bench)

PERSONAS = sorted(folder.name for folder in bench.DATA.iterdir() if (folder / "questions.txt").is_file())


def test_the_bench_has_its_personas():
    assert {"hannah", "aoife", "dimitra", "rosa", "kwabena", "sione", "tom", "priya", "margit"} <= set(PERSONAS)


@pytest.mark.parametrize("persona", PERSONAS)
def test_a_persona_parses_and_its_keys_name_its_observations(persona):
    folder = bench.DATA / persona
    memories = {name: bench.read_memory(folder / f"{name}.txt") for name in bench.CONTEXTS}
    questions = bench.read_questions(folder, memories)  # raises on a key that matches no observation, or two
    names = {entity.name for entities, _ in memories.values() for entity in entities}
    for context, (entities, relations) in memories.items():
        assert all(entity.observations for entity in entities), f"{persona}/{context}: an entity with no observation"
        own = {entity.name for entity in entities}  # three contexts are three files: a relation stays in its own
        for relation in relations:
            assert {relation.source, relation.target} <= own, f"{persona}/{context}: {relation} names no entity of it"
    answerable = [q for q in questions if q.answers]
    assert len(answerable) >= 50 and len(questions) - len(answerable) >= 8
    assert len({q.text for q in questions}) == len(questions), f"{persona}: a question asked twice"
    assert all(name in names for q in answerable for name, _ in q.answers)
