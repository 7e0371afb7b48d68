"""``attnkit.runtime``: one import for running a backend; its names are the real objects."""
import subprocess
import sys

import attnkit.runtime as runtime


def test_every_name_resolves_to_its_home():
    from attnkit import reference
    from attnkit.backends.base import RuntimeLayer
    from attnkit.kvcache.paged import PagedKVCache
    from attnkit.registry import load_backend

    assert set(dir(runtime)) == set(runtime.__all__)
    assert all(getattr(runtime, n) is not None for n in runtime.__all__)
    assert runtime.PagedKVCache is PagedKVCache and runtime.load_backend is load_backend
    assert runtime.RuntimeLayer is RuntimeLayer and runtime.reference is reference


def test_unknown_name_is_an_attribute_error():
    try:
        runtime.nothing_here
    except AttributeError as err:
        assert "nothing_here" in str(err)
    else:
        raise AssertionError("no AttributeError")


def test_importing_it_imports_no_torch():
    code = ("import sys, attnkit.runtime, attnkit.kvcache; "
            "assert 'torch' not in sys.modules; print(attnkit.kvcache.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "PagedKVCache" in out.stdout
