"""Bad inputs through LLM / Engine / Scheduler / SamplingParams are attnkit errors with a code
(never a raw TypeError / ValueError / AttributeError, nor a silent truncation), and leave the
engine as it was."""
import json
import shutil

import pytest
import torch

from attnkit.runner import LLM, Engine, SamplingParams, Scheduler
from attnkit.runner.engine.sampling import sample
from test_runner_errors import code_of


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(tiny_model("llama")[0], device="cpu", attention_backend="torch_native",
               page_size=4, max_tokens=64)


def untouched(engine):
    return engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


@pytest.mark.parametrize("prompts,code", [
    (["hello"], "AK486"),                       # text, not ids
    ([[1.5, 2]], "AK483"),                      # was truncated to 1
    ([[2.0]], "AK483"),
    ([["5", 2]], "AK483"),                      # was parsed as 5
    ([[None, 2]], "AK483"),
    ([[True, 2]], "AK483"),                     # was taken as 1
    ([[[1, 2]]], "AK483"),
    ([torch.tensor([[1, 2]])], "AK486"),
    ([torch.tensor([1.0, 2.0])], "AK483"),
    (5, "AK486"),
    (None, "AK486"),
])
def test_prompts_that_are_not_token_ids(llm, prompts, code):
    assert code_of(lambda: llm.generate(prompts, max_new_tokens=2)) == code
    assert untouched(llm.engine)


def test_token_id_types_that_are_fine(llm):
    import numpy as np

    want = llm.generate([[1, 5, 9]], max_new_tokens=3)[0].token_ids
    for prompt in ((1, 5, 9), torch.tensor([1, 5, 9]), [1, torch.tensor(5), np.int64(9)],
                   np.array([1, 5, 9])):
        assert llm.generate([prompt], max_new_tokens=3)[0].token_ids == want
    assert llm.generate(iter([[1, 5, 9]]), max_new_tokens=3)[0].token_ids == want
    assert [o.token_ids for o in llm.generate([[1, 5, 9]] * 3, max_new_tokens=3)] == [want] * 3
    kw = dict(max_new_tokens=3, temperature=1.0)
    assert llm.generate([[1, 5, 9]], seed=np.int64(4), **kw)[0].token_ids == \
        llm.generate([[1, 5, 9]], seed=4, **kw)[0].token_ids


@pytest.mark.parametrize("kw", [
    {"max_num_batched_tokens": 0}, {"max_num_seqs": 0},     # were silently the LLM's defaults
    {"progress": "yes"}, {"eos_token_id": 1.5}, {"eos_token_id": [2, "x"]},
    {"seed": 2 ** 64, "temperature": 1.0},                  # past torch's seed range
    {"seed": [2 ** 64 - 1, 2 ** 64], "temperature": 1.0}, {"seed": "ab", "temperature": 1.0},
])
def test_generate_keywords(llm, kw):
    assert code_of(lambda: llm.generate([[1, 2], [3]], max_new_tokens=2, **kw)) == "AK486"
    assert untouched(llm.engine)


def test_eos_forms(llm):
    free = llm.generate([[1, 5]], max_new_tokens=6, ignore_eos=True)[0].token_ids
    for eos in (free[2], torch.tensor(free[2]), [free[2]], (127, free[2])):
        out = llm.generate([[1, 5]], max_new_tokens=6, eos_token_id=eos)[0]
        assert out.token_ids == free[:free.index(free[2]) + 1] and out.finish_reason == "stop"


@pytest.mark.parametrize("kw,code", [({"max_num_batched_tokens": 0}, "AK486"),
                                     ({"max_num_seqs": "4"}, "AK486"),
                                     ({"backend_options": 5}, "AK483"),
                                     ({"backend_options": "mla_form"}, "AK483")])
def test_llm_keywords(tiny_model, kw, code):
    assert code_of(lambda: LLM(tiny_model("llama")[0], device="cpu", **kw)) == code


def test_sampling_params():
    assert SamplingParams(stop_token_ids=5).stop_token_ids == (5,)
    assert SamplingParams(stop_token_ids=[5, 6]).stop_token_ids == (5, 6)   # hashable again
    hash(SamplingParams(stop_token_ids=[5]))
    assert SamplingParams(seed=2 ** 64 - 1, temperature=1.0).generator() is not None
    for kw in ({"seed": 2 ** 64}, {"stop_token_ids": 1.0}, {"stop_token_ids": [True]}):
        assert code_of(lambda: SamplingParams(**kw)) == "AK486"


@pytest.mark.parametrize("temperature", [1e-38, 1e-45, 1e-300])
def test_tiny_temperature_is_argmax_not_a_crash(temperature):
    """logits / T overflowed to inf: softmax gave NaN and the draw indexed -1."""
    logits = torch.randn(3, 11) * 5
    params = [SamplingParams(temperature=temperature, top_p=p, seed=i)
              for i, p in enumerate((1.0, 0.5, 0.9))]
    got = sample(logits, params, [p.generator() for p in params])
    assert got == logits.argmax(-1).tolist()


def test_engine_arguments(tiny_model):
    engine = Engine.from_pretrained(tiny_model("llama")[0], backend="torch_native", page_size=4,
                                    max_tokens=32)
    for call in (lambda: engine.prefill(5), lambda: engine.prefill(["abc"]),
                 lambda: engine.prefill([[1.7]]), lambda: engine.prefill([[1]], ids=7),
                 lambda: engine.decode(3), lambda: engine.step([[1, 2]]),
                 lambda: engine.step({"a": 5}), lambda: engine.generate(7, 2),
                 lambda: engine.generate([[1], 5], 2), lambda: engine.generate("hi", 2)):
        assert code_of(call) == "AK483"
    assert code_of(lambda: engine.generate([[1]], 2, eos_token_id=1.5)) == "AK486"
    assert untouched(engine)
    one = engine.generate(torch.tensor([1, 5, 9]), 3)            # one prompt as a tensor
    assert one == engine.generate([1, 5, 9], 3) and isinstance(one[0], int)


def test_scheduler_arguments(tiny_model):
    engine = Engine.from_pretrained(tiny_model("llama")[0], backend="torch_native", page_size=4)
    assert code_of(lambda: Scheduler(None)) == "AK486"
    sched = Scheduler(engine)
    assert code_of(lambda: sched.add([1, 2], "greedy")) == "AK486"
    assert code_of(lambda: sched.add([1, 2], request_id=[1])) == "AK486"
    assert not sched.has_unfinished()


def test_past_max_position_embeddings_warns(tiny_model):
    path, _ = tiny_model("llama")                  # max_position_embeddings 256
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=16, max_tokens=320)
    with pytest.warns(UserWarning, match="max_position_embeddings 256"):
        Scheduler(engine).add(list(range(100)) * 2, SamplingParams(max_new_tokens=58))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Scheduler(engine).add(list(range(100)) * 2, SamplingParams(max_new_tokens=57))  # 256


def test_unreadable_checkpoint_files(tiny_model, tmp_path):
    src, _ = tiny_model("llama")
    for name, text in (("config.json", "{not json"), ("config.json", "[1, 2]"),
                       ("model.safetensors", "garbage")):
        case = tmp_path / f"{name}-{len(text)}"
        shutil.copytree(src, case)
        (case / name).write_text(text)
        assert code_of(lambda: Engine.from_pretrained(case)) == "AK481"
    case = tmp_path / "generation"
    shutil.copytree(src, case)
    (case / "generation_config.json").write_text("{broken")
    assert code_of(lambda: LLM(case, device="cpu")) == "AK481"
    (case / "generation_config.json").write_text(json.dumps({"eos_token_id": "</s>"}))
    assert code_of(lambda: LLM(case, device="cpu")) == "AK486"


def test_a_5000_digit_count_is_a_coded_error():
    """The message's preview of the value printed a 5000-digit int (ValueError past Python's
    digit limit) instead of refusing it."""
    from attnkit.errors import AttnkitError
    from attnkit.runner.engine.checks import check_count

    with pytest.raises(AttnkitError) as err:
        check_count("max_new_tokens", 10 ** 5000, minimum=1, maximum=1 << 20)
    assert err.value.code == "AK483"


def test_5000_digit_sampling_values_and_token_ids_are_coded_errors():
    from attnkit.errors import AttnkitError
    from attnkit.runner.engine.sampling import SamplingParams
    from attnkit.runner.engine.tokens import stop_ids

    for make in (lambda: SamplingParams(temperature=10 ** 5000), lambda: stop_ids([-10 ** 5000])):
        with pytest.raises(AttnkitError):
            make()
