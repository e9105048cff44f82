import pytest

from roles.tasks.arith import ArithTask, arith_exact


def test_arith_exact():
    assert arith_exact("3+15=", "18") == 1.0
    assert arith_exact("3+15=", "18<eos>") == 1.0
    assert arith_exact("3+15=", "18<eos>77") == 1.0
    assert arith_exact("3+15=", "185") == 0.0
    assert arith_exact("3+15=", " 18") == 0.0
    assert arith_exact("3+15=", "") == 0.0
    assert arith_exact("19+19=", "38") == 1.0
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        arith_exact("hello", "1")


def test_the_arith_task_is_a_task_with_the_same_split():
    """What the RL job sees: examples with ids, answers, and the held-out pairs as the eval split."""
    from roles.tasks import build_task
    from roles.tasks.arith import ArithExact

    task = build_task(ArithTask.Config(), seed=0)
    train, held = task.examples("train"), task.examples("eval")
    from roles.tasks.arith import split_pairs

    want_train, want_held = split_pairs(20, 0.2, 0)
    assert [e.id for e in train] == [p.id for p in want_train]
    assert [e.id for e in held] == [p.id for p in want_held]
    ex = task.example(3 * 20 + 15)
    assert (ex.prompt, ex.answer) == ("3+15=", "18")
    assert ArithExact()("18", ex) == {"score": 1.0, "correct": 1.0}
    assert ArithExact()("18<eos>", ex)["score"] == 1.0 and ArithExact()("185", ex)["score"] == 0.0
    assert [e.id for e in build_task(ArithTask.Config(), seed=1).examples("eval")] != [e.id for e in held]
