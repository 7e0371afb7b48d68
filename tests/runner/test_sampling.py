"""Token choice: greedy is argmax; sampling follows softmax(logits / T) restricted by top-k /
top-p; a seed fixes the draws, whatever else shares the batch."""
import math

import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner.engine.sampling import SamplingParams, sample

LOGITS = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))        # probabilities at T = 1


def draws(params: SamplingParams, n: int = 4000) -> torch.Tensor:
    """n tokens from n requests with seeds 0..n-1 over the same logits row -> counts [V]."""
    ps = [SamplingParams(temperature=params.temperature, top_p=params.top_p,
                         top_k=params.top_k, seed=s) for s in range(n)]
    toks = sample(LOGITS.expand(n, -1), ps, [p.generator() for p in ps])
    return torch.bincount(torch.tensor(toks), minlength=4).float() / n


def test_greedy_is_argmax_and_needs_no_generator():
    logits = torch.randn(5, 11)
    assert sample(logits, [SamplingParams()] * 5, [None] * 5) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("params,expected", [
    (SamplingParams(temperature=1.0), [0.5, 0.3, 0.15, 0.05]),
    (SamplingParams(temperature=1.0, top_k=2), [0.5 / 0.8, 0.3 / 0.8, 0, 0]),
    (SamplingParams(temperature=1.0, top_p=0.6), [0.5 / 0.8, 0.3 / 0.8, 0, 0]),   # 0.5 < 0.6
    (SamplingParams(temperature=1.0, top_p=0.45), [1.0, 0, 0, 0]),                 # top token only
    (SamplingParams(temperature=0.5), [p * p / 0.365 for p in (0.5, 0.3, 0.15, 0.05)]),
])
def test_frequencies_follow_the_filtered_distribution(params, expected):
    freq = draws(params)
    # 4000 draws: 4 standard errors of the largest-variance bin is about 0.032
    assert torch.allclose(freq, torch.tensor(expected), atol=0.032), freq.tolist()
    assert all(freq[i] == 0 for i, e in enumerate(expected) if e == 0)


def test_seed_fixes_tokens_independent_of_batch_and_device_order():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    ps = [SamplingParams(temperature=0.9, top_p=0.9, seed=10 + i) for i in range(6)]
    ps[2] = SamplingParams()                                       # a greedy row in the batch
    together = sample(logits, ps, [p.generator() for p in ps])
    alone = [sample(logits[i:i + 1], [p], [p.generator()])[0] for i, p in enumerate(ps)]
    shuffled = [5, 0, 3, 1, 4, 2]
    mixed = sample(logits[shuffled], [ps[i] for i in shuffled], [ps[i].generator() for i in shuffled])
    assert together == alone == [dict(zip(shuffled, mixed))[i] for i in range(6)]


def test_a_seed_replays_a_whole_sequence_of_draws():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1))

    def run(seed):
        p = SamplingParams(temperature=1.0, seed=seed)
        g = p.generator()
        return [sample(logits, [p], [g])[0] for _ in range(20)]

    assert run(10) == run(10) and run(10) != run(11)


@pytest.mark.parametrize("kw", [{"temperature": -1}, {"temperature": math.inf}, {"top_p": 0},
                                {"top_p": 1.5}, {"top_k": -1}, {"seed": -3}, {"seed": 1.5},
                                {"max_new_tokens": -1}, {"stop_token_ids": (-1,)},
                                {"temperature": True}])
def test_bad_parameters_are_ak486(kw):
    with pytest.raises(AttnkitError) as e:
        SamplingParams(**kw)
    assert e.value.code == "AK486" and e.value.field == next(iter(kw))


@pytest.mark.gpu
def test_cuda_logits_sample_the_cpu_tokens():
    """One uniform draw per token from a CPU generator: the device of the logits does not
    change the token (the inverse CDF lands away from bin edges for these draws)."""
    logits = torch.randn(16, 1000, generator=torch.Generator().manual_seed(5))
    ps = [SamplingParams(temperature=0.8, top_p=0.9, top_k=50, seed=i) for i in range(16)]
    cpu = sample(logits, ps, [p.generator() for p in ps])
    assert sample(logits.cuda(), ps, [p.generator() for p in ps]) == cpu
