"""The engine tiers' comparison (tests/engines/compare.py) catches what it must."""
import compare


def run(tokens, logprobs):
    return [{"tokens": tokens, "logprobs": [{str(t): lp} for t, lp in zip(tokens, logprobs)]}]


def test_equal_runs_agree():
    assert compare.verdict(run([1, 2, 3], [-0.5, -1.0, -2.0]), run([1, 2, 3], [-0.5, -1.0, -2.0])) is None


def test_equal_tokens_with_drifted_logprobs_disagree():
    why = compare.verdict(run([1, 2, 3], [-0.5, -1.0, -2.0]), run([1, 2, 3], [-0.5, -1.001, -2.0]))
    assert why is not None and "3 of 3" in why


def test_a_differing_token_counts_the_rest_as_differing():
    assert compare.differences(run([1, 9, 3], [-0.5, -1.0, -2.0]),
                               run([1, 2, 3], [-0.5, -1.0, -2.0]))[:2] == (1, 3)
