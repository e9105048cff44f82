import numpy as np
import pytest

from roles.algorithm.advantages import ADVANTAGES, AdvantageConfig, group_advantages


def test_mean_baseline():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(adv, [0.5, -0.5, -0.5, 0.5])
    assert adv.dtype == np.float32


def test_std_normalised():
    # mean 0.25, population std sqrt(0.25 * 0.75) = 0.4330127
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], AdvantageConfig(std_normalize=True, eps=0.0))
    s = np.sqrt(0.25 * 0.75)
    np.testing.assert_allclose(adv, [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s], rtol=1e-6)


def test_leave_one_out():
    # r_i minus the mean of the other three
    adv = group_advantages([3.0, 1.0, 0.0, 0.0], "leave_one_out")
    np.testing.assert_allclose(adv, [3 - 1 / 3, 1 - 1, 0 - 4 / 3, 0 - 4 / 3], rtol=1e-6)


def test_leave_one_out_with_std():
    r = np.array([2.0, 0.0])
    adv = group_advantages(r, AdvantageConfig(baseline="leave_one_out", std_normalize=True, eps=0.0))
    np.testing.assert_allclose(adv, [2.0 / 1.0, -2.0 / 1.0])  # LOO [2, -2], std 1


def test_groups_are_independent_rows():
    r = np.array([[1.0, 0.0], [5.0, 5.0], [0.0, 2.0]])
    np.testing.assert_allclose(group_advantages(r), [[0.5, -0.5], [0.0, 0.0], [-1.0, 1.0]])


def test_equal_rewards_give_zero_not_nan():
    for name in ADVANTAGES:
        adv = group_advantages([1.0, 1.0, 1.0], name)
        np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(group_advantages([7.0], "leave_one_out"), [0.0])


def test_named_presets_and_errors():
    assert ADVANTAGES["group_std"].std_normalize
    with pytest.raises(ValueError, match="unknown advantage"):
        group_advantages([1.0, 0.0], "bogus")
    with pytest.raises(ValueError, match="shape"):
        group_advantages(np.zeros((2, 2, 2)))


def test_std_normalised_advantages_of_huge_rewards_do_not_vanish():
    # r.std() of rewards near 1e200 overflows (the squares): every advantage was 0, silently.
    adv = group_advantages([0.0, 1e200, 0.0, 1e200], "group_std")
    np.testing.assert_allclose(adv, [-1.0, 1.0, -1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(
        group_advantages([1.0, 2.0, 3.0], "group_std"), np.array([-1, 0, 1]) / np.sqrt(2 / 3), rtol=1e-5
    )
