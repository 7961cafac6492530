"""skyrl_gym.rows: JSONL and parquet round trips, ragged nested columns, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_gym.rows import RowFormatError, read_rows, to_json_columns, write_rows, write_split


def _rows() -> list[dict]:
    return [
        {
            "prompt": [{"role": "user", "content": "Combien de élèves ?"}],
            "env_class": "text2sql",
            "reward_spec": {"method": "rule", "ground_truth": "SELECT 1"},
            "extra_info": {"index": 0, "level": "easy"},
        },
        {
            "prompt": [{"role": "user", "content": "How many?"}],
            "env_class": "text2sql",
            "reward_spec": {"method": "rule", "ground_truth": "SELECT 2"},
            "extra_info": {"index": 1, "level": "hard"},
            "max_turns": 3,  # a column the first row does not have
        },
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip(tmp_path: Path, suffix: str):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    rows = _rows()
    path = write_rows(rows, tmp_path / "sub" / f"train{suffix}")
    back = read_rows(path)
    if suffix == ".jsonl":
        assert back == rows
    else:  # one schema per column: the first row gets the second row's extra column as None
        assert back == [{**rows[0], "max_turns": None}, rows[1]]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def test_jsonl_is_utf8_one_object_a_line(tmp_path: Path):
    path = write_rows(_rows(), tmp_path / "train.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and "élèves" in lines[0]  # not \u00e9-escaped
    assert json.loads(lines[1])["max_turns"] == 3


def test_ragged_nested_keys_in_parquet(tmp_path: Path):
    pytest.importorskip("pyarrow")
    rows = [
        {"id": 0, "reward_spec": {"task": "gcd", "config": {"a": 1, "b": [2, 3]}}},
        {"id": 1, "reward_spec": {"task": "dates", "config": {"format": "%Y"}, "entry": {"x": "é"}}},
    ]
    # as structs: the union of the nested keys, None where a row lacks one
    plain = read_rows(write_rows(rows, tmp_path / "plain.parquet"))
    assert plain[0]["reward_spec"]["config"] == {"a": 1, "b": [2, 3], "format": None}
    assert plain[0]["reward_spec"]["entry"] is None
    assert plain[1]["reward_spec"]["config"] == {"a": None, "b": None, "format": "%Y"}
    # as JSON text: every row keeps exactly its own fields
    names = ["reward_spec.config", "reward_spec.entry"]
    text = read_rows(write_rows(rows, tmp_path / "text.parquet", json_columns=names))
    for original, back in zip(rows, text, strict=True):
        spec = back["reward_spec"]
        assert json.loads(spec["config"]) == original["reward_spec"]["config"]
        assert spec["task"] == original["reward_spec"]["task"]
    assert text[0]["reward_spec"]["entry"] is None  # absent in the row: stays absent (None in parquet)
    assert json.loads(text[1]["reward_spec"]["entry"]) == {"x": "é"}
    assert rows[0]["reward_spec"]["config"] == {"a": 1, "b": [2, 3]}  # the caller's rows are unchanged


def test_to_json_columns_sorts_keys_and_skips_missing_paths():
    row = {"a": {"b": {"z": 1, "y": 2}}, "c": 5}
    out = to_json_columns(row, ["a.b", "c", "missing.path", "c.not_a_dict"])
    assert out == {"a": {"b": '{"y": 2, "z": 1}'}, "c": "5"}
    assert row == {"a": {"b": {"z": 1, "y": 2}}, "c": 5}


def test_write_split_writes_both_formats(tmp_path: Path):
    pytest.importorskip("pyarrow")
    paths = write_split(_rows(), tmp_path, "dev")
    assert [p.name for p in paths] == ["dev.jsonl", "dev.parquet"]
    assert [p.name for p in write_split(_rows(), tmp_path / "j", "dev", parquet=False)] == ["dev.jsonl"]
    assert read_rows(paths[1])[1]["max_turns"] == 3


def test_bad_line_names_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\nnot json\n', encoding="utf-8")
    with pytest.raises(RowFormatError, match=r"bad\.jsonl:3: not a JSON object"):
        read_rows(path)
    path.write_text('{"a": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(RowFormatError, match=r"bad\.jsonl:2: expected a JSON object per line, got list"):
        read_rows(path)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_rows(tmp_path / "nope.jsonl")


def test_json_list_and_json_lines_both_read(tmp_path: Path):
    listed = tmp_path / "train.json"
    listed.write_text(json.dumps([{"q": 1}, {"q": 2}]), encoding="utf-8")
    assert read_rows(listed) == [{"q": 1}, {"q": 2}]
    lines = tmp_path / "lines.json"
    lines.write_text('{"q": 1}\n{"q": 2}\n', encoding="utf-8")
    assert read_rows(lines) == [{"q": 1}, {"q": 2}]
    listed.write_text('[{"q": 1}, 3]', encoding="utf-8")
    with pytest.raises(RowFormatError, match="item 2 of the list is a int"):
        read_rows(listed)


def test_unknown_suffix_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match=r"\.jsonl or \.parquet"):
        write_rows(_rows(), tmp_path / "train.csv")
    assert list(tmp_path.iterdir()) == []
