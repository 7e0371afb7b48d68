"""Engine arguments of the wrong type or size are AK483, never a raw TypeError or a silent drop."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine


def _error(call) -> AttnkitError:
    with pytest.raises(AttnkitError) as info:
        call()
    return info.value


@pytest.fixture(scope="module")
def llama(tiny_model):
    return tiny_model("llama")[0]


@pytest.fixture
def engine(llama):
    return Engine.from_pretrained(llama, backend="torch_native", page_size=4, max_tokens=64)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
@pytest.mark.parametrize("device", ["cuda:7", "cuda"])
def test_cuda_device_without_cuda(llama, device):
    err = _error(lambda: Engine.from_pretrained(llama, backend="torch_native", device=device))
    assert err.code == "AK483" and err.field == "device"
    assert device in err.message and "CUDA is not available" in err.message


@pytest.mark.gpu
def test_cuda_device_index_out_of_range(llama):
    bad = f"cuda:{torch.cuda.device_count()}"
    err = _error(lambda: Engine.from_pretrained(llama, backend="torch_native", device=bad))
    assert err.code == "AK483" and bad in err.message


def test_unparsable_device(llama):
    err = _error(lambda: Engine.from_pretrained(llama, backend="torch_native", device="gpu0"))
    assert err.code == "AK483" and err.field == "device" and "gpu0" in err.message


@pytest.mark.parametrize("kwargs, field", [
    (dict(max_tokens=33.5), "max_tokens"),
    (dict(max_tokens=None), "max_tokens"),
    (dict(max_tokens=0), "max_tokens"),
])
def test_sizes_must_be_ints(llama, kwargs, field):
    err = _error(lambda: Engine.from_pretrained(llama, backend="torch_native", **kwargs))
    assert err.code == "AK483" and err.field == field
    assert str(kwargs[field]) in err.message


@pytest.mark.parametrize("page_size", [4.0, "four", 0, True])
def test_planning_settings_are_parsed_by_the_planner(llama, page_size):
    """page_size is a planning setting: the planner's one parse refuses it (AK306, as
    `attnkit plan --page-size` does), and accepts what it accepts ("16")."""
    err = _error(lambda: Engine.from_pretrained(llama, backend="torch_native", page_size=page_size))
    assert err.code == "AK306" and err.field == "page_size"
    engine = Engine.from_pretrained(llama, backend="torch_native", page_size="16", max_tokens=32)
    assert engine.page_size == 16 == engine.plan.run.page_size


def test_prompt_lens_count_must_match_prompts(engine):
    err = _error(lambda: engine.prefill([[1, 2, 3], [4]], prompt_lens=[5]))
    assert err.code == "AK483" and err.field == "prompt_lens"
    assert "2 prompt" in err.message and "1 prompt length" in err.message
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


@pytest.mark.parametrize("max_new", [None, 2.5, "3", True])
def test_max_new_tokens_must_be_int(engine, max_new):
    err = _error(lambda: engine.generate([[1, 2]], max_new))
    assert err.code == "AK483" and err.field == "max_new_tokens" and str(max_new) in err.message
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


def test_the_cache_memory_is_checked_once(llama, monkeypatch):
    """One memory-fit check (kvcache/checks.py), asked once per engine; its refusal is the
    engine's AK483 naming max_tokens."""
    from attnkit.kvcache import checks

    asked = []
    monkeypatch.setattr(checks, "free_bytes", lambda dev: asked.append(dev) or 10**12)
    Engine.from_pretrained(llama, backend="torch_native", page_size=4, max_tokens=64)
    assert asked == [torch.device("cpu")]
    monkeypatch.setattr(checks, "free_bytes", lambda dev: 1000)
    err = _error(lambda: Engine.from_pretrained(llama, backend="torch_native", page_size=4,
                                                max_tokens=64))
    assert err.code == "AK483" and err.field == "max_tokens" and "GiB" in err.message
