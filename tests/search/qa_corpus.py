"""A small passage corpus for the search tests: distinct topics, so that a clear query has one right answer."""

from __future__ import annotations

import json
from pathlib import Path

PASSAGES = [
    (
        "curie",
        "Marie Curie",
        "Marie Curie was a physicist and chemist who did pioneering research on radioactivity. She was born in Warsaw.",
    ),
    ("warsaw", "Warsaw", "Warsaw is the capital and largest city of Poland. It stands on the Vistula river."),
    ("vistula", "Vistula", "The Vistula is the longest river in Poland; it flows north into the Baltic Sea."),
    (
        "kilimanjaro",
        "Mount Kilimanjaro",
        "Mount Kilimanjaro is a dormant volcano in Tanzania and the highest mountain in Africa.",
    ),
    ("tanzania", "Tanzania", "Tanzania is a country in East Africa. Its capital is Dodoma."),
    (
        "photosynthesis",
        "Photosynthesis",
        "Photosynthesis is the process by which green plants use sunlight to make sugar from carbon dioxide and water.",
    ),
    (
        "lovelace",
        "Ada Lovelace",
        "Ada Lovelace was an English mathematician who wrote the first algorithm for Charles Babbage's Analytical Engine.",
    ),
    (
        "engine",
        "Analytical Engine",
        "The Analytical Engine was a mechanical general-purpose computer designed by Charles Babbage.",
    ),
    (
        "reef",
        "Great Barrier Reef",
        "The Great Barrier Reef is the largest coral reef system in the world, off the coast of Queensland, Australia.",
    ),
    (
        "saxophone",
        "Saxophone",
        "The saxophone is a woodwind instrument with a single reed, invented by Adolphe Sax in the 1840s.",
    ),
    (
        "espresso",
        "Espresso",
        "Espresso is coffee brewed by forcing hot water under pressure through finely ground coffee beans.",
    ),
    (
        "mitochondrion",
        "Mitochondrion",
        "A mitochondrion is an organelle that produces most of the chemical energy (ATP) a cell uses.",
    ),
    (
        "jupiter",
        "Jupiter",
        "Jupiter is the largest planet of the Solar System, a gas giant known for its Great Red Spot.",
    ),
    ("penicillin", "Penicillin", "Penicillin is an antibiotic discovered by Alexander Fleming in 1928."),
    (
        "haiku",
        "Haiku",
        "A haiku is a short Japanese poem of three lines with five, seven and five syllables.",
    ),
    (
        "glacier",
        "Glacier",
        "A glacier is a persistent body of dense ice that moves slowly under its own weight.",
    ),
]
"""(id, title, text) of every passage."""

TITLES = {pid: title for pid, title, _ in PASSAGES}


def write_corpus(path: Path, rows: list[tuple[str, str, str]] = PASSAGES) -> Path:
    """Write ``rows`` as a Search-R1 JSONL corpus (``{"id", "title", "text", "contents"}``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for pid, title, text in rows:
            row = {"id": pid, "title": title, "text": text, "contents": f'"{title}"\n{text}'}
            handle.write(json.dumps(row) + "\n")
    return path


def task(question: str, answers: list[str], max_turns: int | None = None) -> dict:
    """A SkyRL dataset row as a task: the question as the prompt, the answers as ``ground_truth.target``."""
    extras: dict = {
        "reward_spec": {"method": "rule", "ground_truth": {"target": answers}},
        "question": question,
    }
    if max_turns is not None:
        extras["max_turns"] = max_turns
    return {"prompt": [{"role": "user", "content": f"Question: {question}"}], "extras": extras}
