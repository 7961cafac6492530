"""SkyRL-format datasets from JSONL and parquet, the prompt-length filter, and the resumable batch iterator."""

from __future__ import annotations

import json
from itertools import islice

import pytest

from skyrl_train.data import BatchIterator, PromptDataset, read_rows, row_to_env_args


def row(i: int, words: int = 3, **extra) -> dict:
    return {
        "data_source": "synthetic",
        "prompt": [
            {"role": "system", "content": "answer"},
            {"role": "user", "content": " ".join(["w"] * words)},
        ],
        "env_class": "text2sql",
        "reward_spec": {"method": "rule", "ground_truth": f"SELECT {i}"},
        "db_id": f"db{i}",
        **extra,
    }


class WordTokenizer:
    """A stand-in tokenizer: one token per word of each message, 2 per message for the template, 3 for the
    generation prompt. ``as_dict`` mimics transformers 5's BatchEncoding return value."""

    def __init__(self, as_dict: bool = False):
        self.as_dict = as_dict
        self.calls = []

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
        self.calls.append(add_generation_prompt)
        n = sum(2 + len(m["content"].split()) for m in messages) + (3 if add_generation_prompt else 0)
        ids = list(range(n))
        return {"input_ids": ids} if self.as_dict else ids


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_and_parquet_read_the_same(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [row(i) for i in range(3)]
    jsonl = write_jsonl(tmp_path / "train.jsonl", rows)
    parquet = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    assert read_rows(jsonl) == rows
    assert read_rows(parquet) == rows
    data = PromptDataset.from_files([jsonl, parquet])
    assert len(data) == 6 and data.num_filtered == 0 and data.num_read == 6
    assert data[4] == rows[1]


def test_row_to_env_args_puts_every_other_column_in_extras():
    env_class, prompt, extras = row_to_env_args(row(7))
    assert env_class == "text2sql"
    assert prompt[1]["role"] == "user"
    assert extras == {
        "data_source": "synthetic",
        "reward_spec": {"method": "rule", "ground_truth": "SELECT 7"},
        "db_id": "db7",
    }
    bare = {k: v for k, v in row(1).items() if k != "env_class"}
    assert row_to_env_args(bare, default_env_class="text2sql").env_class == "text2sql"
    with pytest.raises(ValueError, match="environment.env_class"):
        row_to_env_args(bare)


@pytest.mark.parametrize("as_dict", [False, True])
def test_prompts_over_the_limit_are_filtered_and_counted(tmp_path, as_dict):
    # Length with the template: system (2 + 1) + user (2 + words) + generation prompt 3 = 8 + words.
    path = write_jsonl(
        tmp_path / "d.jsonl", [row(0, words=2), row(1, words=5), row(2, words=3), row(3, words=9)]
    )
    tokenizer = WordTokenizer(as_dict)
    data = PromptDataset.from_files(path, tokenizer=tokenizer, max_prompt_length=11)
    assert [r["db_id"] for r in data] == ["db0", "db2"]  # 10 and 11 tokens kept; 13 and 17 dropped
    assert data.num_filtered == 2 and data.num_read == 4
    assert tokenizer.calls and all(tokenizer.calls)  # lengths include the generation prompt
    assert PromptDataset.from_files(path, max_prompt_length=11).num_filtered == 0  # no tokenizer: no filter


def test_bad_rows_name_the_file_and_row(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [row(0), {"prompt": "hello"}])
    with pytest.raises(ValueError, match=r"bad.jsonl row 2: prompt must be a list"):
        PromptDataset.from_files(bad)
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"env_class": "x"}])
    with pytest.raises(ValueError, match=r"missing.jsonl row 1: no 'prompt' column"):
        PromptDataset.from_files(missing)
    (tmp_path / "broken.jsonl").write_text('{"prompt": [}\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:1"):
        read_rows(tmp_path / "broken.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_rows(tmp_path / "nope.jsonl")
    as_string = dict(row(0), prompt=json.dumps(row(0)["prompt"]))
    assert PromptDataset([as_string])[0]["prompt"] == row(0)["prompt"]


def test_shuffling_is_deterministic_per_seed_and_differs_per_epoch():
    data = list(range(10))

    def batches(seed):
        return list(BatchIterator(data, batch_size=3, epochs=2, seed=seed))

    first = batches(seed=1)
    assert first == batches(seed=1)
    assert first != batches(seed=2)
    assert len(first) == 6  # 3 full batches per epoch; the 10th row of each epoch is dropped
    epoch0, epoch1 = sum(first[:3], []), sum(first[3:], [])
    assert epoch0 != epoch1
    assert len(set(epoch0)) == 9 and len(set(epoch1)) == 9
    plain = list(BatchIterator(data, batch_size=4, shuffle=False, drop_last=False))
    assert plain == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_resume_continues_at_exactly_the_next_batch():
    data = [f"row{i}" for i in range(7)]
    full = list(BatchIterator(data, batch_size=2, epochs=3, seed=5))  # 3 batches per epoch, 9 in all
    for stop in (0, 2, 3, 4, 8, 9):
        it = BatchIterator(data, batch_size=2, epochs=3, seed=5)
        seen = list(islice(iter(it), stop))
        state = json.loads(json.dumps(it.state_dict()))  # survives a JSON checkpoint
        resumed = BatchIterator(data, batch_size=2, epochs=3, seed=5)
        resumed.load_state_dict(state)
        assert resumed.batches_done == stop
        assert seen + list(resumed) == full, stop
        assert len(resumed) == 0


def test_the_state_after_n_batches_resumes_there_wherever_the_reader_got():
    """A reader that ran ahead (the asynchronous mode's producer) checkpoints the position of the batches
    training consumed: resumed there, the iterator yields exactly the batches after them."""
    data = [f"row{i}" for i in range(7)]
    full = list(BatchIterator(data, batch_size=2, epochs=3, seed=5))
    ahead = BatchIterator(data, batch_size=2, epochs=3, seed=5)
    list(islice(iter(ahead), 7))  # read 7 batches
    for trained in (0, 2, 3, 4, 7):
        resumed = BatchIterator(data, batch_size=2, epochs=3, seed=5)
        resumed.load_state_dict(json.loads(json.dumps(ahead.state_after(trained))))
        assert resumed.batches_done == trained and list(resumed) == full[trained:], trained


def test_resume_refuses_a_different_dataset_or_seed():
    it = BatchIterator(list(range(6)), batch_size=2, seed=1)
    next(iter(it))
    with pytest.raises(ValueError, match="had 6 rows, now 5"):
        BatchIterator(list(range(5)), batch_size=2, seed=1).load_state_dict(it.state_dict())
    with pytest.raises(ValueError, match="seed was 1, now 2"):
        BatchIterator(list(range(6)), batch_size=2, seed=2).load_state_dict(it.state_dict())
    with pytest.raises(ValueError, match="fewer than one batch"):
        BatchIterator([1], batch_size=2)
