"""The offline search QA dataset: corpus and splits built from WordNet and countryinfo.

The bundled dataset is built on first use into ``cache_root()`` (``$SKYRL_GYM_CACHE`` or
``~/.cache/skyrl_gym``) unless it is there already; later runs reuse it.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
from collections import Counter, defaultdict
from pathlib import Path

import bm25s
import pyarrow.parquet as pq
import pytest

from skyrl_gym.bundled import bundle
from skyrl_gym.datasets.search.countries import CURRENCY_NAMES, Country, load_countries
from skyrl_gym.datasets.search.questions import INTERSECTION_KINDS, TEMPLATES
from skyrl_gym.datasets.search.row_format import make_prompt
from skyrl_gym.datasets.search.wordnet import Synset, load_wordnet, wordnet_dir
from skyrl_gym.envs.search import tasks
from skyrl_gym.envs.search.scoring import normalize_answer as norm

MIN_SIZES = {"train": 1000, "test": 200}
EXTRA_INFO_KEYS = {"split", "index", "hops", "kind", "question", "supporting_ids", "held_out"}


@pytest.fixture(scope="module")
def folder() -> Path:
    return tasks.ensure_dataset()


@pytest.fixture(scope="module")
def splits(folder: Path) -> dict[str, list[dict]]:
    return {split: tasks.load_split(split) for split in tasks.SPLITS}


@pytest.fixture(scope="module")
def corpus(folder: Path) -> dict[str, dict]:
    return {p["id"]: p for p in tasks.load_corpus()}


@pytest.fixture(scope="module")
def rows(splits) -> list[dict]:
    return splits["train"] + splits["test"]


def entity(passage_id: str) -> str:
    """The country or synset a passage is about: ``country-FRA`` for ``country-FRA-economy``."""
    return "-".join(passage_id.split("-")[:2])


def words_in(needle: str, haystack: str) -> bool:
    """Whether ``needle`` appears as whole words in ``haystack``, both normalised as answers are."""
    needle = norm(needle)
    return bool(needle) and f" {needle} " in f" {norm(haystack)} "


# -- sizes and format --------------------------------------------------------------------------------------
def test_sizes_sources_and_hops(splits, corpus):
    for split, split_rows in splits.items():
        assert len(split_rows) >= MIN_SIZES[split], split
        sources = Counter(r["data_source"] for r in split_rows)
        assert set(sources) == {"countries", "wordnet"} and min(sources.values()) >= 0.3 * len(split_rows)
        hops = Counter(r["extra_info"]["hops"] for r in split_rows)
        assert set(hops) == {1, 2} and hops[2] >= 0.25 * len(split_rows), (split, hops)
        kinds = Counter(r["extra_info"]["kind"] for r in split_rows)
        assert set(kinds) == set(TEMPLATES), (split, set(TEMPLATES) - set(kinds))
    assert 10_000 <= len(corpus) <= 60_000
    stats = json.loads((tasks.ensure_dataset() / "stats.json").read_text())
    assert stats["train"]["total"] == len(splits["train"]) and stats["corpus"]["total"] == len(corpus)


def test_rows_are_in_skyrl_format(splits, folder):
    for split, split_rows in splits.items():
        for index, row in enumerate(split_rows):
            assert set(row) == {"data_source", "prompt", "env_class", "reward_spec", "extra_info", "question",
                                "max_turns"}  # fmt: skip
            assert row["env_class"] == "search" and row["max_turns"] == 4
            assert row["prompt"] == make_prompt(row["question"])
            assert row["prompt"][0]["role"] == "user"
            assert row["prompt"][0]["content"].endswith(f"Question: {row['question']}")
            spec = row["reward_spec"]
            assert spec["method"] == "rule" and set(spec["ground_truth"]) == {"target"}
            target = spec["ground_truth"]["target"]
            assert target and all(isinstance(t, str) and norm(t) for t in target)
            info = row["extra_info"]
            assert set(info) == EXTRA_INFO_KEYS
            assert info["split"] == split and info["index"] == index and info["question"] == row["question"]
            assert info["kind"] in TEMPLATES and info["hops"] == len(info["supporting_ids"]) in (1, 2)
        parquet = pq.read_table(folder / f"{split}.parquet").to_pylist()
        assert [r["question"] for r in parquet] == [r["question"] for r in split_rows]
        assert parquet[0]["reward_spec"] == split_rows[0]["reward_spec"]


def test_prompt_follows_the_search_protocol():
    content = make_prompt("  Who wrote it?  ")[0]["content"]
    for tag in ("<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<answer>",
                "</answer>"):  # fmt: skip
        assert tag in content
    assert content.endswith("\n\nQuestion: Who wrote it?")


def test_corpus_rows_have_the_wiki_format(corpus):
    for pid, passage in corpus.items():
        assert set(passage) == {"id", "title", "text", "contents"} and passage["id"] == pid
        assert passage["contents"] == f'"{passage["title"]}"\n{passage["text"]}'
        assert passage["title"] and passage["text"]
    dog = corpus["wordnet-n02084071"]
    assert dog["title"].startswith("dog, domestic dog")
    assert "a kind of canine" in dog["text"] and "domesticated by man" in dog["text"]
    france = corpus["country-FRA-overview"]
    assert france["title"] == "France" and "The capital of France is Paris." in france["text"]
    assert "euro (EUR)" in corpus["country-FRA-economy"]["text"]
    assert "Spain" in corpus["country-FRA-geography"]["text"]


# -- splits ------------------------------------------------------------------------------------------------
def test_train_and_test_are_disjoint(splits):
    questions = {split: [norm(r["question"]) for r in rows] for split, rows in splits.items()}
    for split_questions in questions.values():
        assert len(set(split_questions)) == len(split_questions)
    assert not set(questions["train"]) & set(questions["test"])
    # the held-out half of the test split asks about countries and synsets that no training question touches
    held = [r for r in splits["test"] if r["extra_info"]["held_out"]]
    assert len(held) >= 0.4 * len(splits["test"])
    assert not any(r["extra_info"]["held_out"] for r in splits["train"])
    train_entities = {entity(pid) for r in splits["train"] for pid in r["extra_info"]["supporting_ids"]}
    held_entities = {entity(pid) for r in held for pid in r["extra_info"]["supporting_ids"]}
    assert held_entities and not held_entities & train_entities


@pytest.mark.slow
def test_build_is_deterministic_across_processes(folder, tmp_path):
    """A fresh process with another hash seed writes the same files; another seed draws other questions."""
    script = textwrap.dedent(
        f"""
        from skyrl_gym.datasets.search.build import build
        build({str(tmp_path / "same")!r}, seed=0)
        build({str(tmp_path / "other")!r}, seed=1, n_train=300, n_test=100)
        """
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=240)
    for name in ("corpus.jsonl", "train.jsonl", "test.jsonl"):
        assert (tmp_path / "same" / name).read_bytes() == (folder / name).read_bytes(), name
    other = {json.loads(line)["question"] for line in (tmp_path / "other" / "test.jsonl").open()}
    same = {json.loads(line)["question"] for line in (folder / "test.jsonl").open()}
    assert len(other) == 100 and len(other & same) < 50


# -- no leaks, and answers need retrieval ------------------------------------------------------------------
WINDOW = 4


def test_no_passage_contains_a_question(rows, corpus):
    """Neither a question nor a question followed by its answer appears in any passage (normalised text)."""
    texts = [norm(p["contents"]).split() for p in corpus.values()]
    windows = {w for tokens in texts for w in zip(*(tokens[i:] for i in range(WINDOW)), strict=False)}
    suspects = []
    for row in rows:
        tokens = norm(row["question"]).split()
        assert len(tokens) >= WINDOW, row["question"]
        # a passage holding the whole question holds its first window: look closer only then
        if tuple(tokens[:WINDOW]) in windows:
            suspects.append(" ".join(tokens))
    joined = "\n".join(" ".join(tokens) for tokens in texts)
    assert not [q for q in suspects if q in joined]
    for marker in ("Question:", "<answer>", "<search>"):
        assert not any(marker in p["contents"] for p in corpus.values())


def test_answers_are_not_in_the_questions(rows):
    for row in rows:
        for alias in row["reward_spec"]["ground_truth"]["target"]:
            assert not words_in(alias, row["question"]), (alias, row["question"])


def test_supporting_passages_hold_the_answer_chain(rows, corpus):
    for row in rows:
        info, target = row["extra_info"], row["reward_spec"]["ground_truth"]["target"]
        ids = info["supporting_ids"]
        assert all(pid in corpus for pid in ids) and len(set(ids)) == len(ids), ids
        last = corpus[ids[-1]]["contents"]
        assert any(words_in(alias, last) for alias in target), (row["question"], ids[-1])
        if info["hops"] == 1:
            continue
        first, second = corpus[ids[0]], corpus[ids[1]]
        if info["kind"] in INTERSECTION_KINDS:
            # both passages list the answer among others
            assert any(words_in(alias, first["contents"]) for alias in target)
            continue
        # a bridge: the first passage names the entity of the second, and does not hold the answer
        assert words_in(second["title"].split(", ")[0], first["contents"]), (row["question"], ids)
        assert not any(words_in(alias, first["text"]) for alias in target), (row["question"], ids)


def test_bm25_finds_the_supporting_passages(rows, corpus):
    ids = list(corpus)
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([corpus[pid]["contents"] for pid in ids], stopwords="en", show_progress=False),
        show_progress=False,
    )
    sample = random.Random(0).sample(rows, 400)
    found, _ = retriever.retrieve(
        bm25s.tokenize([r["question"] for r in sample], stopwords="en", show_progress=False),
        k=5,
        show_progress=False,
    )
    hits: dict[int, list[bool]] = defaultdict(list)
    for row, top in zip(sample, found, strict=True):
        first = row["extra_info"]["supporting_ids"][0]
        hits[row["extra_info"]["hops"]].append(first in {ids[i] for i in top})
    recall = {hops: sum(h) / len(h) for hops, h in hits.items()}
    print(f"BM25 recall@5 of the first supporting passage: {recall}")
    assert recall[1] >= 0.6, recall  # single-hop: the question names what the passage is about
    assert recall[2] >= 0.4, recall  # multi-hop: the first hop is found from the question alone


# -- every question has exactly one answer -----------------------------------------------------------------
def template_slots(kind: str, question: str, country_names: set[str]) -> dict[str, str]:
    """Read the slots back out of a question of ``kind`` (the inverse of the template)."""
    template = TEMPLATES[kind]
    if kind == "common_neighbour":  # two names joined by "and", which names may contain
        head, tail = template.split("{country}")
        middle, end = tail.split("{other}")
        body = question.removeprefix(head).removesuffix(end)
        splits = [
            (body[: m.start()], body[m.end() :])
            for m in re.finditer(re.escape(middle), body)
            if body[: m.start()] in country_names and body[m.end() :] in country_names
        ]
        assert len(splits) == 1, question
        return {"country": splits[0][0], "other": splits[0][1]}
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+)", re.escape(template))
    match = re.fullmatch(pattern, question)
    assert match, (kind, question)
    return match.groupdict()


def test_every_question_has_exactly_one_answer(rows):
    """Solve every question by brute force over all the facts: exactly one value, and the target names it."""
    countries = load_countries()
    by_code = {c.code: c for c in countries}
    synsets = load_wordnet()
    defined_as: dict[str, list[Synset]] = defaultdict(list)
    for synset in synsets.values():
        defined_as[norm(synset.definition)].append(synset)

    def where(test) -> list[Country]:
        return [c for c in countries if test(c)]

    def named(name: str) -> list[Country]:
        return where(lambda c: c.name == name)

    def neighbours(countries_: list[Country]) -> list[Country]:
        return [by_code[b] for c in countries_ for b in c.borders or ()]

    def with_capital(capital: str) -> list[Country]:
        return where(lambda c: norm(c.capital) == norm(capital))

    def with_calling_code(code: str) -> list[Country]:
        return where(lambda c: code in c.calling_codes)

    def with_tld(tld: str) -> list[Country]:
        return where(lambda c: tld.lower() in (t.lower() for t in c.tlds))

    def with_division(division: str) -> list[Country]:
        return where(lambda c: norm(division) in {norm(d) for d in c.divisions})

    def capital(cs):
        return [c.capital for c in cs]

    def currency(cs):
        return [CURRENCY_NAMES[code] for c in cs for code in c.currencies]

    def calling_code(cs):
        return [f"+{code}" for c in cs for code in c.calling_codes]

    def names(cs):
        return [c.name for c in cs]

    def lemma(keys):
        return [synsets[k].lemmas[0] for k in keys]

    solvers = {
        "capital_of": lambda s: capital(named(s["country"])),
        "country_of_capital": lambda s: names(with_capital(s["capital"])),
        "currency_of": lambda s: currency(named(s["country"])),
        "country_of_currency_code": lambda s: names(where(lambda c: s["code"] in c.currencies)),
        "calling_code_of": lambda s: calling_code(named(s["country"])),
        "country_of_calling_code": lambda s: names(with_calling_code(s["code"])),
        "tld_of": lambda s: [t for c in named(s["country"]) for t in c.tlds],
        "country_of_tld": lambda s: names(with_tld(s["tld"])),
        "subregion_of": lambda s: [c.subregion for c in named(s["country"])],
        "language_of": lambda s: [lang for c in named(s["country"]) for lang in c.languages],
        "demonym_of": lambda s: [c.demonym.split(",")[0] for c in named(s["country"])],
        "country_of_division": lambda s: names(with_division(s["division"])),
        "only_neighbour_of": lambda s: names(neighbours(named(s["country"]))),
        "currency_of_capital": lambda s: currency(with_capital(s["capital"])),
        "language_of_capital": lambda s: [lang for c in with_capital(s["capital"]) for lang in c.languages],
        "calling_code_of_capital": lambda s: calling_code(with_capital(s["capital"])),
        "capital_of_calling_code": lambda s: capital(with_calling_code(s["code"])),
        "subregion_of_calling_code": lambda s: [c.subregion for c in with_calling_code(s["code"])],
        "capital_of_tld": lambda s: capital(with_tld(s["tld"])),
        "capital_of_only_neighbour": lambda s: capital(neighbours(named(s["country"]))),
        "currency_of_only_neighbour": lambda s: currency(neighbours(named(s["country"]))),
        "common_neighbour": lambda s: names(
            [c for c in neighbours(named(s["country"])) if c in neighbours(named(s["other"]))]
        ),
        "capital_of_division_country": lambda s: capital(with_division(s["division"])),
        "word_from_definition": lambda s: [x.lemmas[0] for x in defined_as[norm(s["definition"])]],
        "hypernym_from_definition": lambda s: lemma(
            h for x in defined_as[norm(s["definition"])] for h in x.hypernyms
        ),
        "grand_hypernym_from_definition": lambda s: lemma(
            g for x in defined_as[norm(s["definition"])] for h in x.hypernyms for g in synsets[h].hypernyms
        ),
        "holonym_from_definition": lambda s: lemma(
            w for x in defined_as[norm(s["definition"])] for w in x.part_of
        ),
        "holonym_hypernym_from_definition": lambda s: lemma(
            h for x in defined_as[norm(s["definition"])] for w in x.part_of for h in synsets[w].hypernyms
        ),
        "antonym_from_definition": lambda s: lemma(
            a for x in defined_as[norm(s["definition"])] for a in x.antonyms
        ),
    }
    assert set(solvers) == set(TEMPLATES)
    country_names = {c.name for c in countries}
    for row in rows:
        kind = row["extra_info"]["kind"]
        answers = solvers[kind](template_slots(kind, row["question"], country_names))
        assert len(answers) == 1, (row["question"], answers)
        assert norm(answers[0]) in {norm(t) for t in row["reward_spec"]["ground_truth"]["target"]}, row[
            "question"
        ]


# -- the API -----------------------------------------------------------------------------------------------
def test_loaders_and_default_task(folder, splits, corpus):
    assert tasks.corpus_path() == folder / "corpus.jsonl"
    assert tasks.load_corpus(folder) == tasks.load_corpus(folder / "corpus.jsonl") == list(corpus.values())
    first = tasks.load_split("test")
    first[0]["question"] = "changed"
    assert tasks.load_split("test")[0]["question"] == splits["test"][0]["question"]
    with pytest.raises(ValueError, match="train, test"):
        tasks.load_split("dev")
    with pytest.raises(FileNotFoundError, match="build.py"):
        tasks.load_corpus(folder / "missing.jsonl")
    task = tasks.default_task(3)
    assert task == tasks.default_task(3)
    assert set(task["extras"]) == {"data_source", "reward_spec", "extra_info", "question", "max_turns"}
    assert task["prompt"] == make_prompt(task["extras"]["question"])
    assert task["extras"]["extra_info"]["split"] == "test"
    assert len({tasks.default_task(seed)["extras"]["question"] for seed in range(20)}) > 10


def test_missing_wordnet_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("WNSEARCHDIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        wordnet_dir()


def test_countries_are_cleaned():
    countries = load_countries()
    codes = [c.code for c in countries]
    assert len(codes) == len(set(codes)) and 230 <= len(codes) <= 260
    assert "SCG" not in codes and "ANT" not in codes  # states that no longer exist
    by_code = {c.code: c for c in countries}
    for c in countries:
        for b in c.borders or ():
            assert c.code in by_code[b].borders  # borders are kept only when both sides list them
    assert by_code["PRT"].borders == ("ESP",)
    assert set(CURRENCY_NAMES) >= {code for c in countries for code in c.currencies}


@pytest.mark.slow
def test_concurrent_builds_leave_one_complete_dataset(monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path))
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(tasks.ensure_dataset(5))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results[0] == results[1] == tmp_path / "search" / results[0].name
    assert results[0].name.startswith(f"{bundle('search').prefix}-v") and results[0].name.endswith("-seed5")
    assert sorted(p.name for p in (tmp_path / "search").iterdir()) == [results[0].name]  # no staging left
    assert {p.name for p in results[0].iterdir()} == {"corpus.jsonl", "countries.jsonl", "train.jsonl", "test.jsonl",
                                                     "train.parquet", "test.parquet", "stats.json"}  # fmt: skip


def test_the_cache_folder_changes_with_any_builder_file(monkeypatch, tmp_path):
    from skyrl_gym.datasets.search import build as builder

    names = {path.name for path in builder._builder_files()}
    assert {"wordnet.py", "countries.py", "corpus.py", "questions.py", "splits.py", "row_format.py", "build.py",
            "rows.py"} <= names  # fmt: skip
    assert tasks.dataset_dir(3).name == f"{builder.DATASET_NAME}-v{builder.generator_version()}-seed3"
    copies = []
    for path in builder._builder_files():
        copies.append(tmp_path / path.name)
        copies[-1].write_bytes(path.read_bytes())
    monkeypatch.setattr(builder, "_builder_files", lambda: copies)
    versions = set()
    for changed in (None, "splits.py", "rows.py"):
        if changed:
            (tmp_path / changed).write_text((tmp_path / changed).read_text() + "\n# changed\n")
        builder.generator_version.cache_clear()
        versions.add(builder.generator_version())
    builder.generator_version.cache_clear()
    assert len(versions) == 3
