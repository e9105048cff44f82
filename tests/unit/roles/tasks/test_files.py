"""The file-backed tasks (gsm8k, math, dataset): formats, splits, ids, and every data error.

Data files are written here into tmp_path with json, pyarrow and datasets; nothing is
downloaded. Error tests assert that the message names the field, the file and the problem.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from roles.tasks import build_task, task_class
from roles.tasks.base import TaskDataError
from roles.tasks.files import read_rows

GSM_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7", "extra": 1},
    {"question": "What is 1000 + 234?", "answer": "It is 1,234.\n#### 1,234", "extra": 2},
    {"question": "Half of 10?", "answer": "10 / 2 = 5\n#### 5", "extra": 3},
]


# ---------------------------------------------------------------------- writing data files


def write(path: Path, rows: list[dict], form: str | None = None) -> Path:
    """Write ``rows`` at ``path`` as JSON Lines, a JSON array, Parquet or a save_to_disk folder."""
    form = form or {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(path.suffix, "saved")
    if form == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif form == "array":
        path.write_text(json.dumps(rows, indent=2))
    elif form == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        import datasets

        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def make(name: str, **options):
    """The task registered as ``name``, built from a role map's ``task`` section."""
    seed = options.pop("seed", 0)
    config = task_class(name).Config.model_validate({"name": name, **options})
    return build_task(config, seed)


def data_error(name: str, **options) -> str:
    with pytest.raises(TaskDataError) as e:
        make(name, **options)
    return str(e.value)


def config_error(name: str, **options) -> str:
    with pytest.raises(ValidationError) as e:
        task_class(name).Config.model_validate({"name": name, **options})
    return str(e.value)


FORMATS = [("x.jsonl", None), ("x.json", "jsonl"), ("x.json", "array"), ("x.parquet", None), ("x_saved", None)]


# ---------------------------------------------------------------------- formats


@pytest.mark.parametrize("filename,form", FORMATS)
def test_every_format_gives_the_same_gsm8k_examples(tmp_path, filename, form):
    path = write(tmp_path / filename, GSM_ROWS, form)
    task = make("gsm8k", train_files=[str(path)])
    train = task.examples("train")
    assert [ex.id for ex in train] == [0, 1, 2]
    assert [ex.answer for ex in train] == ["7", "1234", "5"]  # commas stripped
    assert train[0].prompt == (
        GSM_ROWS[0]["question"] + ' Let\'s think step by step and output the final answer after "####".'
    )
    assert train[1].metadata == {"solution": GSM_ROWS[1]["answer"]}
    assert task.examples("eval") == ()
    assert task.default_reward == "gsm8k"


@pytest.mark.parametrize("filename,form", FORMATS)
def test_read_rows_keeps_only_the_columns_asked_for(tmp_path, filename, form):
    path = write(tmp_path / filename, GSM_ROWS, form)
    rows = read_rows(path, "task.train_files[0]", ["question"], optional=["answer", "absent"])
    assert set(rows.columns) == {"question", "answer", "extra"}
    assert rows.rows[2] == {"question": GSM_ROWS[2]["question"], "answer": GSM_ROWS[2]["answer"]}


def test_json_lines_skip_blank_lines_and_name_lines(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("\n" + json.dumps(GSM_ROWS[0]) + "\n\n" + json.dumps(GSM_ROWS[1]) + "\n\n")
    rows = read_rows(path, "task.train_files[0]", ["question"])
    assert len(rows.rows) == 2 and rows.where(1) == "row 1 (line 4)"
    for form in ("jsonl", "array"):  # a byte-order mark (Windows editors) is not data
        bom = write(tmp_path / f"bom_{form}.json", GSM_ROWS, form)
        bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())
        assert read_rows(bom, "task.train_files[0]", ["question"]).rows[0] == {"question": GSM_ROWS[0]["question"]}


def test_a_single_path_is_a_list_of_one_and_relative_paths_are_from_the_cwd(tmp_path, monkeypatch):
    write(tmp_path / "train.jsonl", GSM_ROWS)
    monkeypatch.chdir(tmp_path)
    task = make("gsm8k", train_files="train.jsonl")
    assert task.config.train_files == ["train.jsonl"] and len(task.examples("train")) == 3


# ---------------------------------------------------------------------- splits and ids


def numbered(n: int, start: int = 0) -> list[dict]:
    return [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(start, start + n)]


def test_eval_files_get_ids_after_every_train_row(tmp_path):
    a = write(tmp_path / "a.jsonl", numbered(3))
    b = write(tmp_path / "b.parquet", numbered(2, 3))
    ev = write(tmp_path / "test.jsonl", numbered(4, 100))
    task = make("gsm8k", train_files=[str(a), str(b)], eval_files=[str(ev)], instruction="")
    assert [ex.id for ex in task.examples("train")] == [0, 1, 2, 3, 4]
    assert [ex.id for ex in task.examples("eval")] == [5, 6, 7, 8]
    assert task.example(6).prompt == "q101" and task.example(6).answer == "101"
    assert task.example(4).prompt == "q4"
    with pytest.raises(KeyError, match="no example with id 9"):
        task.example(9)


def test_skipped_rows_keep_their_ids_and_are_counted(tmp_path):
    rows = numbered(5)
    rows[1]["question"] = "   "
    rows[3]["answer"] = "no final number here"
    rows[4]["answer"] = "#### seven"
    path = write(tmp_path / "a.jsonl", rows)
    second = write(tmp_path / "b.parquet", numbered(2, 5))
    task = make("gsm8k", train_files=[str(path), str(second)])
    # An id is a row's place among all rows read, so the second file's rows start at 5.
    assert [ex.id for ex in task.examples("train")] == [0, 2, 5, 6]
    assert task.example(5).prompt.startswith("q5 ")
    assert task.skipped == {
        "task.train_files[0]": {
            "an empty 'question'": 1,
            "no '#### <answer>' in 'answer'": 1,
            "a '#### <answer>' in 'answer' that is not a number": 1,
        },
        "task.train_files[1]": {},
    }


def test_eval_fraction_split_is_seeded_disjoint_and_stable(tmp_path):
    path = str(write(tmp_path / "a.parquet", numbered(50)))
    task = make("gsm8k", train_files=[path], eval_fraction=0.2, seed=0)
    train, held = [ex.id for ex in task.examples("train")], [ex.id for ex in task.examples("eval")]
    assert len(held) == 10 and len(train) == 40
    assert not set(train) & set(held) and set(train) | set(held) == set(range(50))
    assert train == sorted(train) and held == sorted(held)  # the split picks members, not order
    assert held != list(range(40, 50))  # drawn, not the tail
    again = make("gsm8k", train_files=[path], eval_fraction=0.2, seed=0)
    assert again.examples("eval") == task.examples("eval")
    assert again.examples("train") == task.examples("train")
    other = make("gsm8k", train_files=[path], eval_fraction=0.2, seed=1)
    assert [ex.id for ex in other.examples("eval")] != held
    pinned = make("gsm8k", train_files=[path], eval_fraction=0.2, seed=1, split_seed=0)
    assert [ex.id for ex in pinned.examples("eval")] == held


def test_max_examples_caps_train_after_the_split(tmp_path):
    path = str(write(tmp_path / "a.jsonl", numbered(50)))
    full = make("gsm8k", train_files=[path], eval_fraction=0.2)
    capped = make("gsm8k", train_files=[path], eval_fraction=0.2, max_examples=7)
    assert capped.examples("train") == full.examples("train")[:7]
    assert capped.examples("eval") == full.examples("eval")
    assert len(make("gsm8k", train_files=[path], max_examples=500).examples("train")) == 50


# ---------------------------------------------------------------------- gsm8k, math, dataset


def test_gsm8k_column_names_and_instruction_are_options(tmp_path):
    path = write(tmp_path / "a.jsonl", [{"q": "Two plus two?", "sol": "#### 4"}])
    task = make("gsm8k", train_files=[str(path)], question_key="q", answer_key="sol", instruction="Answer after ####.")
    assert task.example(0).prompt == "Two plus two? Answer after ####."
    assert (
        make("gsm8k", train_files=[str(path)], question_key="q", answer_key="sol", instruction="").example(0).prompt
        == "Two plus two?"
    )


MATH_ROWS = [
    {"problem": "1+1?", "solution": r"So $\boxed{2}$.", "answer": "2", "level": "Level 1", "type": "Algebra"},
    {
        "problem": "Half?",
        "solution": r"First \boxed{1}, then $\boxed{\frac{1}{2}}$.",
        "answer": None,
        "level": "Level 2",
        "type": "Algebra",
    },
    {"problem": "Pi?", "solution": r"It is \boxed{3.14}.", "answer": r"\pi", "level": "Level 3", "type": "Geometry"},
]


def test_math_answer_column_wins_and_the_last_box_fills_in(tmp_path):
    task = make("math", train_files=[str(write(tmp_path / "m.parquet", MATH_ROWS))])
    assert [ex.answer for ex in task.examples("train")] == ["2", r"\frac{1}{2}", r"\pi"]
    assert task.example(1).metadata == {"level": "Level 2", "type": "Algebra", "solution": MATH_ROWS[1]["solution"]}
    assert task.example(0).prompt.startswith("1+1? Please reason step by step")
    assert task.default_reward == "math_verify"


def test_math_with_only_a_solution_or_only_an_integer_answer(tmp_path):
    only_solution = [{"problem": p["problem"], "solution": p["solution"]} for p in MATH_ROWS]
    task = make("math", train_files=[str(write(tmp_path / "s.jsonl", only_solution))])
    assert [ex.answer for ex in task.examples("train")] == ["2", r"\frac{1}{2}", "3.14"]
    assert task.example(0).metadata == {"solution": MATH_ROWS[0]["solution"]}
    aime = [
        {"problem": "Find n.", "answer": 204, "subject": "Number Theory"},
        {"problem": "No box.", "solution": "none", "answer": None},
    ]
    task = make("math", train_files=[str(write(tmp_path / "aime.jsonl", aime))])
    assert task.example(0).answer == "204" and task.example(0).metadata == {"subject": "Number Theory"}
    assert [ex.id for ex in task.examples("train")] == [0]
    assert task.skipped["task.train_files[0]"] == {"no 'answer' and no \\boxed{} in 'solution'": 1}


def test_math_needs_an_answer_or_a_solution_column(tmp_path):
    path = write(tmp_path / "m.jsonl", [{"problem": "1+1?", "final": "2"}])
    msg = data_error("math", train_files=[str(path)])
    assert msg == f"task.train_files[0]: {path}: no column 'answer' or 'solution' (columns: problem, final)"


CHAT_ROWS = [
    {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}],
        "gold": "hello",
        "tag": "greet",
        "difficulty": 1,
    },
    {"messages": [{"role": "user", "content": "Bye?"}], "gold": "bye", "tag": "part", "difficulty": 2},
]


@pytest.mark.parametrize("filename", ["c.jsonl", "c.parquet", "c_saved"])
def test_dataset_task_with_chat_messages_and_metadata(tmp_path, filename):
    path = write(tmp_path / filename, CHAT_ROWS)
    task = make(
        "dataset",
        train_files=[str(path)],
        prompt_key="messages",
        answer_key="gold",
        metadata_keys=["tag", "difficulty"],
    )
    ex = task.example(0)
    assert ex.prompt == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"})
    assert ex.answer == "hello" and ex.metadata == {"tag": "greet", "difficulty": 1}
    assert task.default_reward is None


def test_dataset_task_with_text_prompts_and_no_reference(tmp_path):
    rows = [{"prompt": "Write a haiku."}, {"prompt": ""}, {"prompt": "Write a limerick."}]
    task = make("dataset", train_files=[str(write(tmp_path / "p.jsonl", rows))])
    assert [(ex.id, ex.prompt, ex.answer) for ex in task.examples("train")] == [
        (0, "Write a haiku.", ""),
        (2, "Write a limerick.", ""),
    ]
    assert task.skipped["task.train_files[0]"] == {"an empty 'prompt'": 1}


@pytest.mark.parametrize(
    "messages,problem",
    [
        ([{"role": "bot", "content": "x"}], "'messages' message 0 has role 'bot' (roles: system, user, assistant)"),
        ([{"role": "user", "content": 3}], "'messages' message 0 (user) has content 3, expected a string"),
        (["hi"], "'messages' message 0 is a str, expected a {role, content} mapping"),
        ([{"role": "system", "content": "x"}], "'messages' has no user message (roles: system)"),
        ({"role": "user"}, "'messages' is a mapping ({'role': 'user'}), expected a string or a list of chat messages"),
    ],
)
def test_dataset_task_names_the_row_of_a_broken_chat_prompt(tmp_path, messages, problem):
    rows = [{"messages": [{"role": "user", "content": "ok"}]}, {"messages": messages}]
    path = write(tmp_path / "c.jsonl", rows)
    msg = data_error("dataset", train_files=[str(path)], prompt_key="messages")
    assert msg == f"task.train_files[0]: {path}: row 1 (line 2): {problem}"


def test_dataset_task_skips_empty_chat_prompts(tmp_path):
    rows = [
        {"messages": []},
        {"messages": [{"role": "user", "content": ""}]},
        {"messages": [{"role": "user", "content": "ok"}]},
    ]
    task = make("dataset", train_files=[str(write(tmp_path / "c.jsonl", rows))], prompt_key="messages")
    assert [ex.id for ex in task.examples("train")] == [2]
    # A blank user turn is as empty as a blank text prompt, a system message beside it or not.
    rows = [
        {"messages": [{"role": "user", "content": "  \n"}]},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ""}]},
        {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "ok"}]},
    ]
    task = make("dataset", train_files=[str(write(tmp_path / "d.jsonl", rows))], prompt_key="messages")
    assert [ex.id for ex in task.examples("train")] == [2]
    assert task.skipped == {"task.train_files[0]": {"an empty 'messages'": 2}}


# ---------------------------------------------------------------------- data errors


def test_missing_file_is_named_at_parse_time_and_at_read_time(tmp_path, monkeypatch):
    good = str(write(tmp_path / "a.jsonl", GSM_ROWS))
    msg = config_error("gsm8k", train_files=[good, str(tmp_path / "nope.jsonl")])
    assert "train_files.1" in msg and f"{tmp_path / 'nope.jsonl'}: no such file or folder" in msg
    with pytest.raises(TaskDataError, match=r"^task.train_files\[0\]: .*nope.parquet: no such file or folder$"):
        read_rows(tmp_path / "nope.parquet", "task.train_files[0]", ["question"])
    monkeypatch.chdir(tmp_path)
    assert f"nope.jsonl: no such file or folder (resolved to {tmp_path / 'nope.jsonl'})" in (
        config_error("gsm8k", train_files=["nope.jsonl"])
    )


def test_unknown_extension(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("question,answer\n")
    msg = config_error("gsm8k", train_files=[str(path)])
    assert "train_files.0" in msg and f"{path}: unknown file type '.csv' (supported: .jsonl, .json, .parquet" in msg
    with pytest.raises(TaskDataError, match=r"task.eval_files\[2\]: .*a.csv: unknown file type"):
        read_rows(path, "task.eval_files[2]", ["question"])


def test_truncated_parquet(tmp_path):
    path = write(tmp_path / "a.parquet", GSM_ROWS)
    path.write_bytes(path.read_bytes()[:-20])
    msg = data_error("gsm8k", train_files=[str(path)])
    assert msg.startswith(f"task.train_files[0]: {path}: not a readable Parquet file (ArrowInvalid")


def test_invalid_json_names_its_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(GSM_ROWS[0]) + "\n\n" + '{"question": "x", "answer": }\n')
    msg = data_error("gsm8k", train_files=[str(path)])
    assert msg.startswith(f"task.train_files[0]: {path}: line 3: invalid JSON at column 29: Expecting value")


def test_a_json_line_cut_short_names_the_end_of_that_line(tmp_path):
    """The error is at the line's end, not "column 1" (of the newline's next line)."""
    path = tmp_path / "a.jsonl"
    path.write_text(
        json.dumps(GSM_ROWS[0]) + "\n" + '{"question": "x", "answer": "y"\n' + json.dumps(GSM_ROWS[0]) + "\n"
    )
    msg = data_error("gsm8k", train_files=[str(path)])
    assert msg.startswith(
        f"task.train_files[0]: {path}: line 2: invalid JSON at column 32 (the end of the line): Expecting ',' delimiter"
    )
    path.write_bytes(json.dumps(GSM_ROWS[0]).encode() + b"\r\n" + b'{"question": "x", \r\n')
    assert data_error("gsm8k", train_files=[str(path)]).startswith(
        f"task.train_files[0]: {path}: line 2: invalid JSON at column 19 (the end of the line): Expecting property"
    )


def test_json_that_is_not_one_object_per_line(tmp_path):
    pretty = tmp_path / "a.json"
    pretty.write_text(json.dumps(GSM_ROWS[0], indent=2))
    msg = data_error("gsm8k", train_files=[str(pretty)])
    assert msg.startswith(f"task.train_files[0]: {pretty}: line 1: invalid JSON")
    assert "one object per line, or one array of objects" in msg
    scalar = tmp_path / "b.jsonl"
    scalar.write_text(json.dumps(GSM_ROWS[0]) + "\n[1, 2]\n")
    assert data_error("gsm8k", train_files=[str(scalar)]) == (
        f"task.train_files[0]: {scalar}: line 2: a JSON array, where each line holds one object"
    )
    array = tmp_path / "c.json"
    array.write_text(json.dumps([GSM_ROWS[0], "oops"]))
    assert data_error("gsm8k", train_files=[str(array)]) == (
        f"task.train_files[0]: {array}: item 1 of the JSON array is a string, not an object"
    )
    broken = tmp_path / "d.json"
    broken.write_text('[\n  {"question": "x",\n')
    assert data_error("gsm8k", train_files=[str(broken)]).startswith(
        f"task.train_files[0]: {broken}: invalid JSON at line 3, column 1"
    )


@pytest.mark.parametrize("filename,form", FORMATS)
def test_missing_column_lists_the_columns_present(tmp_path, filename, form):
    rows = [{"q": r["question"], "a": r["answer"]} for r in GSM_ROWS]
    good = write(tmp_path / "good.jsonl", GSM_ROWS)
    path = write(tmp_path / filename, rows, form)
    msg = data_error("gsm8k", train_files=[str(good)], eval_files=[str(path)])
    assert msg == f"task.eval_files[0]: {path}: no column 'question' (columns: q, a)"


@pytest.mark.parametrize("filename", ["a.jsonl", "a.parquet"])
def test_a_wrongly_typed_cell_names_its_row(tmp_path, filename):
    rows = [{"question": "ok", "answer": "#### 1"}, {"question": 12, "answer": "#### 2"}]
    if filename.endswith(".parquet"):
        rows = [{"question": 11, "answer": "#### 1"}, {"question": 12, "answer": "#### 2"}]
    path = write(tmp_path / filename, rows)
    where = "row 1 (line 2)" if filename.endswith(".jsonl") else "row 0"
    value = 12 if filename.endswith(".jsonl") else 11
    assert data_error("gsm8k", train_files=[str(path)]) == (
        f"task.train_files[0]: {path}: {where}: 'question' is an integer ({value}), expected a string"
    )


def test_numeric_answers_as_pandas_writes_them(tmp_path):
    # An integer column with a gap is float64 in pandas: 72.0, and NaN for the gap.
    rows = [
        {"problem": "a", "answer": 72.0},
        {"problem": "b", "answer": float("nan")},
        {"problem": "c", "answer": 0.5},
        {"problem": "d", "answer": 7},
    ]
    path = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    task = make("math", train_files=[str(path)])
    assert [ex.answer for ex in task.examples("train")] == ["72", "0.5", "7"]
    assert task.skipped == {"task.train_files[0]": {"no 'answer' and no \\boxed{} in 'solution'": 1}}
    path = write(tmp_path / "inf.jsonl", [{"problem": "a", "answer": 1}]).with_suffix(".jsonl")
    path.write_text('{"problem": "a", "answer": Infinity}\n')
    assert data_error("math", train_files=[str(path)]) == (
        f"task.train_files[0]: {path}: row 0 (line 1): 'answer' is a number (inf), expected a string or a number"
    )


def test_a_lone_surrogate_is_named_by_its_row(tmp_path):
    # Valid JSON, not valid text: the tokenizer failed on it with a TypeError naming no file.
    path = tmp_path / "s.jsonl"
    path.write_text('{"question": "ok", "answer": "#### 1"}\n{"question": "caf\\udce9", "answer": "#### 2"}\n')
    assert data_error("gsm8k", train_files=[str(path)]) == (
        f"task.train_files[0]: {path}: row 1 (line 2): 'question' holds a lone surrogate (U+DCE9) at "
        "character 3: not valid Unicode text (an escape such as \\ud800 in JSON, without its pair)"
    )
    path.write_text('{"m": [{"role": "user", "content": "\\ud800"}]}\n')
    assert "'m' message 0 (user) holds a lone surrogate (U+D800)" in data_error(
        "dataset", train_files=[str(path)], prompt_key="m"
    )
    path.write_text('{"question": "\u00e9 \\ud83d\\ude00", "answer": "#### 1"}\n')  # a pair is an emoji
    assert make("gsm8k", train_files=[str(path)]).examples("train")[0].prompt.startswith("\u00e9 \U0001f600")


def test_json_that_python_cannot_hold_is_named_by_its_line(tmp_path):
    good = json.dumps(GSM_ROWS[0])
    path = tmp_path / "x.jsonl"
    path.write_text(f'{good}\n{{"question": "q", "answer": {"9" * 5000}}}\n')
    msg = data_error("gsm8k", train_files=[str(path)])
    assert msg.startswith(f"task.train_files[0]: {path}: line 2: unreadable JSON (Exceeds the limit (4300 digits)")
    path.write_text(f'{good}\n{{"question": {"[" * 100_000}{"]" * 100_000}}}\n')
    assert data_error("gsm8k", train_files=[str(path)]) == (
        f"task.train_files[0]: {path}: line 2: unreadable JSON (nested too deeply for Python's JSON parser)"
    )
    array = tmp_path / "x.json"
    array.write_text(f"[{good}, {'[' * 100_000}{']' * 100_000}]")
    assert data_error("gsm8k", train_files=[str(array)]) == (
        f"task.train_files[0]: {array}: unreadable JSON (nested too deeply for Python's JSON parser)"
    )


def test_paths_that_a_shell_would_have_expanded_get_a_hint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shards = tmp_path / "data"
    shards.mkdir()
    for i in range(2):
        write(shards / f"train-{i:05d}-of-00002.parquet", GSM_ROWS)
    assert (
        f"{shards}: a folder, but not one written by datasets' save_to_disk (it has no state.json); it holds "
        "data files (train-00000-of-00002.parquet, train-00001-of-00002.parquet): list each of them in the field"
    ) in config_error("gsm8k", train_files=[str(shards)])
    assert "data/*.parquet: no such file or folder" in config_error("gsm8k", train_files=["data/*.parquet"])
    assert "patterns are not expanded: list each file" in config_error("gsm8k", train_files=["data/*.parquet"])
    assert "'~' is not expanded here: write the full path" in config_error("gsm8k", train_files=["~/x.parquet"])
    gz = tmp_path / "x.jsonl.gz"
    gz.write_bytes(b"")
    assert f"{gz}: a compressed file (.gz), which is not read: decompress it first" in config_error(
        "gsm8k", train_files=[str(gz)]
    )


def test_no_usable_rows_names_the_file_and_the_reasons(tmp_path):
    good = write(tmp_path / "good.jsonl", GSM_ROWS)
    rows = [
        {"question": "", "answer": "#### 1"},
        {"question": None, "answer": "#### 1"},
        {"question": "x", "answer": "1"},
    ]
    bad = write(tmp_path / "bad.parquet", rows)
    assert data_error("gsm8k", train_files=[str(good), str(bad)]) == (
        f"task.train_files[1]: {bad}: no usable rows (3 rows: 2 with an empty 'question'; "
        "1 with no '#### <answer>' in 'answer')"
    )
    # A file without rows says so, in every format (not "no column": it has no columns at all).
    for name, text in [("empty.jsonl", "\n"), ("blank.jsonl", ""), ("empty.json", "[]")]:
        empty = tmp_path / name
        empty.write_text(text)
        msg = data_error("gsm8k", train_files=[str(empty)])
        assert msg == f"task.train_files[0]: {empty}: no usable rows (the file has no rows)"
    empty_table = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), empty_table)
    assert data_error("gsm8k", train_files=[str(empty_table)]) == (
        f"task.train_files[0]: {empty_table}: no usable rows (the file has no rows)"
    )


def test_a_dataset_dict_folder_is_refused_with_its_splits(tmp_path):
    import datasets

    folder = tmp_path / "gsm8k"
    ds = datasets.Dataset.from_list(GSM_ROWS)
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(folder))
    msg = config_error("gsm8k", train_files=[str(folder)])
    assert (
        f"{folder}: a DatasetDict folder (splits: train, test); name one split's folder, e.g. {folder / 'train'}" in msg
    )
    task = make("gsm8k", train_files=[str(folder / "train")], eval_files=[str(folder / "test")])
    assert [ex.id for ex in task.examples("eval")] == [3, 4, 5]
    other = tmp_path / "plain"
    other.mkdir()
    assert "not one written by datasets' save_to_disk" in config_error("gsm8k", train_files=[str(other)])


def test_a_damaged_save_to_disk_folder(tmp_path):
    folder = write(tmp_path / "saved", GSM_ROWS)
    for arrow in folder.glob("*.arrow"):
        arrow.write_bytes(b"not arrow at all")
    msg = data_error("gsm8k", train_files=[str(folder)])
    assert msg.startswith(f"task.train_files[0]: {folder}: cannot ")


def test_an_eval_fraction_that_leaves_a_split_empty(tmp_path):
    path = write(tmp_path / "a.jsonl", numbered(3))
    msg = data_error("gsm8k", train_files=[str(path)], eval_fraction=0.1)
    assert msg == (
        "task.eval_fraction: 0.1 of 3 usable train rows leaves 0 for eval and 3 for training; both need at least one"
    )


# ---------------------------------------------------------------------- config errors


def test_wrong_config_combinations(tmp_path):
    a = str(write(tmp_path / "a.jsonl", GSM_ROWS))
    b = str(write(tmp_path / "b.jsonl", GSM_ROWS))
    assert "eval_files and eval_fraction (0.1) are two ways to make the eval split: give one of them" in (
        config_error("gsm8k", train_files=[a], eval_files=[b], eval_fraction=0.1)
    )
    assert "eval_files[0] is also train_files[0]" in config_error("gsm8k", train_files=[a], eval_files=[a])
    # A file listed twice, or once through a link, would have its rows read (and trained on) twice.
    link = tmp_path / "a-link.jsonl"
    link.symlink_to(a)
    assert "train_files[1] is also train_files[0]" in config_error("gsm8k", train_files=[a, str(link)])
    assert "eval_files[2] is also eval_files[0]" in config_error("gsm8k", train_files=[a], eval_files=[b, a, b])
    assert "eval_fraction" in config_error("gsm8k", train_files=[a], eval_fraction=1.0)
    assert "max_examples" in config_error("gsm8k", train_files=[a], max_examples=0)
    msg = config_error("gsm8k", train_files=[a], question_column="q")
    assert "question_column" in msg and "Extra inputs are not permitted" in msg
    assert "train_files" in config_error("gsm8k") and "Field required" in config_error("gsm8k")
    assert "at least 1 item" in config_error("gsm8k", train_files=[])
    assert "train_files" in config_error("gsm8k", train_files=3)
    assert "answer_key" in config_error("dataset", train_files=[a], answer_key=3)
    assert "split_seed" in config_error("gsm8k", train_files=[a], split_seed=-1)
