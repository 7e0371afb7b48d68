"""The error catalog is executable: every entry's before/after example is run, generated from
the catalog (so an example cannot drift from what attnkit does).

- ``attnkit ...`` command lines (with ``VAR=value`` prefixes and ``&&`` chains) run through
  the CLI's ``main`` in a scratch directory holding the files the examples name (FILES).
  Before: a non-zero exit whose output carries the entry's code (as the error, or as a reason
  in the rejected list). After: exit 0.
- A JSON object is a config.json: ``...`` stands for the rest of a valid llama config. Before:
  planning it raises the code; after: it plans.
- A Python snippet runs in a namespace of runtime names and small objects (``namespace``).
  Before: it raises ``AttnkitError`` with the code; after: it raises nothing.
An example that cannot run here is listed in NOT_RUN with why; the list is checked too, so an
example that becomes runnable (or stops being) must move.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from attnkit.errors import CATALOG, AttnkitError

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "src" / "attnkit" / "model" / "presets"
SHIPPED_PROFILE = ROOT / "src" / "attnkit" / "planning" / "profiles" / "nvidia-h200.json"

# (code, "before" | "after") -> why it is not run here (SCHEMATIC below: both examples)
NOT_RUN = {
    ("AK452", "after"): "a script of the reader's own",
    ("AK465", "after"): "a script of the reader's own",
}
# examples that name objects of the reader's own program (a schematic line, not a statement
# the namespace can run): why, per code, for both examples
SCHEMATIC = {
    "AK104": "needs a backend that declares one phase only; no shipped backend does",
    "AK122": "every feature of the vocabulary has a backend now (torch_native serves sparse_topk); "
             "tests/planning/test_planning_dsa.py raises it with a registry that lacks them",
    "AK111": "needs a sparse backend with narrower DSA sizes than torch_native's (any); the "
             "planner's reasons are proven by tests/planning/test_planning_dsa.py",
    "AK105": "needs a backend without fp32; every shipped backend has it",
    "AK308": "needs two backends with disjoint page sizes; no shipped pair is",
    "AK900": "an internal error is a bug: nothing reproduces it on purpose",
    "AK492": "installs another transformers (the oldest-transformers CI tier tests it)",
    "AK412": "needs a CUDA device and a model on it",
    "AK413": "the error is the head count of a tp=2 shard, which the comment states",
    "AK414": "schematic: a cache and block tables of the reader's step",
    "AK415": "schematic: a slot formula of the reader's own code",
    "AK416": "schematic: block tables of the reader's step, refused when the step is built from them",
    "AK417": "schematic: a query_start_loc of the reader's own metadata",
    "AK418": "the mismatch is with a cache the comment names; refused when the step meets it",
    "AK419": "refused when the layer reaches a backend, not when it is built",
    "AK441": "no shipped backend serves one layer kind only (merged into AK440)",
    "AK444": "the plan lines show the fix; the runtime refusal needs a cache built by hand "
             "(tests/backends/test_envelope.py proves it)",
    "AK445": "the plan lines show the fix; the runtime refusal needs a layer built by hand "
             "(tests/backends/test_envelope.py proves it)",
    "AK446": "the plan lines show the fix; the runtime refusal needs a cache built by hand "
             "(tests/backends/test_envelope.py proves it)",
    "AK447": "the plan lines show the fix; the runtime refusal needs a cache built by hand "
             "(tests/backends/test_envelope.py proves it)",
    "AK442": "refused when the step meets a cross-attention layer of the reader's model",
    "AK443": "needs an MLA layer spec and its weights of the reader's model",
    "AK448": "needs a DSA layer spec, its weights and the indexer inputs of the reader's model "
             "(tests/conformance/test_dsa.py proves the refusal)",
    "AK451": "the shared input check (AK410) refuses a float64 q before triton's own check",
    "AK452": "the test process runs Triton through the interpreter (TRITON_INTERPRET=1), which this check is about",
    "AK457": "needs a StaticDecode buffer set of the reader's engine",
    "AK458": "needs a StaticDecode buffer set of the reader's engine",
    "AK465": "the test process runs Triton through the interpreter (TRITON_INTERPRET=1), which this check is about",
    "AK466": "needs the kv_b_proj weight of the reader's checkpoint",
    "AK470": "needs Qwen2.5-1M's layers and page count",
    "AK471": "needs a dual-chunk backend object and a layer spec of the reader's model",
    "AK472": "needs the reader's rotary call and dual chunk config",
    "AK473": "refused when the config reaches a layer, not when it is built",
    "AK474": "needs the reader's rotary module and step",
    "AK480": "needs an encoder-decoder checkpoint with weights",
    "AK481": "needs the reader's checkpoint paths",
    "AK482": "needs 8 ranks and an OOM kill",
    "AK483": "needs a live engine of the reader's",
    "AK485": "needs the reader's model and a 1000-token prompt",
    "AK486": "needs the reader's LLM and prompts",
    "AK488": "needs the reader's model and two steps",
    "AK490": "needs a transformers checkpoint path",
    "AK491": "needs a transformers model with sliding layers",
    "AK496": "a vLLM command line: the vLLM engine tier (.ci/engine-tier vllm) tests these refusals",
    "AK497": "a vLLM command line on CUDA: the vLLM tier tests the CUSTOM selection on its platform class",
}
# Examples that drift from what attnkit does, each expected to fail (strict: once it passes, take
# it off): (code, which) -> what it gives. None today; a new entry is a bug to report to the lead.
DRIFTING: dict[tuple[str, str], str] = {}

for _code, _why in SCHEMATIC.items():
    for _which in ("before", "after"):
        NOT_RUN.setdefault((_code, _which), _why)


def _llama() -> dict:
    return json.loads((PRESETS / "llama-3.1-8b.json").read_text())


def _files() -> dict[str, str | bytes]:
    """path (relative to the scratch directory) -> content, for the files examples name."""
    llama = _llama()
    small = {**llama, "hidden_size": 1024, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 32}                                          # head_dim 32: not triton's
    windowed = {**llama, "sliding_window": 4096,
                "layer_types": ["window_attention"] * llama["num_hidden_layers"]}
    return {
        "my-model/config.json": json.dumps(small),
        "windowed-model/config.json": json.dumps(windowed),
        "sliding-model/config.json": json.dumps({**windowed, "layer_types": ["sliding_attention"]
                                                 * llama["num_hidden_layers"]}),
        "broken-model/config.json": '{"model_type": "llama", "num_attention_heads": 32,,}',
        "redownloaded-model/config.json": json.dumps(llama),
        "flan-t5-xl/config.json": json.dumps({"model_type": "t5", "d_model": 2048, "num_heads": 32,
                                              "num_layers": 24}),
        "bloom-7b1/config.json": json.dumps({"model_type": "bloom", "n_head": 32, "n_layer": 30,
                                             "hidden_size": 4096}),
        "falcon-7b/config.json": json.dumps({"model_type": "falcon", "num_attention_heads": 71,
                                             "num_kv_heads": 1, "hidden_size": 4544,
                                             "num_hidden_layers": 32, "alibi": False,
                                             "new_decoder_architecture": False, "multi_query": True}),
        "ModernBERT-base/config.json": json.dumps({"model_type": "modernbert", "num_attention_heads": 12,
                                                   "hidden_size": 768, "num_hidden_layers": 22}),
        "Llama-3.1-8B/config.json": json.dumps(llama),
        # a safetensors file: an 8-byte header length, the header, then raw (not UTF-8) tensor bytes
        "Llama-3.1-8B/model.safetensors": b"\x02\x00\x00\x00\x00\x00\x00\x00{}\xff\xfe\x00\x80",
        "model/config.json": json.dumps(llama),
        "list-model/config.json": json.dumps([llama]),
        "model/generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": 2}),
        "broken/config.json": '{"model_type": "llama", "num_attention_heads": ' + "9" * 5000 + "}",
        "h200.json": SHIPPED_PROFILE.read_text(),
        "edited.json": '{"schema": 1, "entries": "not a list"}',
        **_pipeline_dirs(),
    }


def _hunyuan() -> dict:
    files = json.loads((PRESETS / "pipelines" / "hunyuanvideo.json").read_text())
    files.pop("_source")
    return files


def _pipeline_dirs() -> dict[str, str]:
    """Pipeline directories the AK52x examples name, made from the hunyuanvideo preset's files:
    a partial download (no transformer config), a DiT config with an attention key attnkit does
    not read, a custom pipeline class, and a transformer class attnkit does not know."""
    files = _hunyuan()
    index, dit = files["model_index.json"], files["transformer/config.json"]
    dirs = {
        "HunyuanVideo": {k: v for k, v in files.items() if k != "transformer/config.json"},
        "hunyuanvideo-sparse": {**files, "transformer/config.json": {**dit, "sparse_attention": True}},
        "MyPipeline": {"model_index.json": {**index, "_class_name": "MyPipeline"},
                       "text_encoder/config.json": files["text_encoder_2/config.json"]},   # CLIP's
        "pipeline-with-new-dit": {**files, "model_index.json": {**index, "transformer": ["diffusers", "MyNewDiT"]}},
    }
    return {f"{d}/{path}": json.dumps(content) for d, parts in dirs.items() for path, content in parts.items()}


# What an "after" example's comment says was done first, done in a copy of the scratch directory
AFTER_DONE = {
    ("AK522", "after"): lambda: {"hunyuanvideo-sparse/transformer/config.json":
                                 json.dumps(_hunyuan()["transformer/config.json"])},
    ("AK523", "after"): lambda: {"HunyuanVideo/transformer/config.json":
                                 json.dumps(_hunyuan()["transformer/config.json"])},
}


def _examples():
    for code, e in CATALOG.items():
        for which, text in (("before", e.example_before), ("after", e.example_after)):
            yield pytest.param(code, which, text, id=f"{code}-{which}")


def _kind(text: str) -> str:
    body = text.strip()
    if body.startswith("{"):
        return "config"
    words = shlex.split(body.split("&&")[0], comments=True)
    words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]
    if words[:1] == ["attnkit"]:
        return "command"
    if words[:2] == ["pip", "install"]:
        return "install"
    if words[:1] == ["python"] and not body.startswith("python -c"):
        return "shell"                                  # a script of the reader's own
    return "python"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalog")
    for rel, content in _files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / rel).write_bytes(content)
        else:
            (root / rel).write_text(content)
    return root


@pytest.mark.parametrize("code,which,text", list(_examples()))
def test_catalog_example(code, which, text, scratch, monkeypatch, request, tmp_path):
    kind = _kind(text)
    if (code, which) in DRIFTING:
        request.applymarker(pytest.mark.xfail(reason=DRIFTING[code, which], strict=True))
    if (code, which) in NOT_RUN:
        assert kind in ("python", "command", "install", "shell"), (code, which)
        pytest.skip(NOT_RUN[code, which])
    assert kind not in ("install", "shell"), f"{code} {which} is a {kind} line: list it in NOT_RUN with why"
    if (code, which) in AFTER_DONE:
        scratch = _copy_with(scratch, tmp_path, AFTER_DONE[code, which]())
    monkeypatch.chdir(scratch)
    raised = CATALOG[code].merged_into or code     # a merged code's example raises the new one
    if kind == "command":
        rc, out = _run_commands(text, monkeypatch, request)
        if which == "before":
            assert rc not in (0, None) and raised in re.findall(r"AK\d{3}", out), (rc, out[-2000:])
        else:
            assert rc in (0, None), out[-2000:]
    elif kind == "config":
        _check_config(raised, which, text)
    else:
        _check_python(raised, which, text, request)


def _copy_with(scratch: Path, tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the scratch directory with ``files`` written over it."""
    import shutil

    root = tmp_path / "scratch"
    shutil.copytree(scratch, root, symlinks=True)
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


def _run_commands(text: str, monkeypatch, request) -> tuple[int | None, str]:
    from attnkit.cli.main import main

    rc, out = 0, ""
    for part in text.split("&&"):
        words = shlex.split(part, comments=True)
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            monkeypatch.setenv(key, value)
        if words[:2] == ["attnkit", "generate"]:
            request.getfixturevalue("tiny_llama")
        if words[:2] == ["attnkit", "tune"] and "cpu" not in words:
            _needs_cuda(text)
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                rc = main(words[1:])
            except SystemExit as exc:
                rc = exc.code
        out += stdout.getvalue() + stderr.getvalue()
        if rc not in (0, None):
            break
    return rc, out


def _needs_cuda(text: str) -> None:
    torch = pytest.importorskip("torch")
    on_cpu = "CPU-only" in text
    if torch.cuda.is_available() == on_cpu:
        pytest.skip("runs on a CPU-only machine" if on_cpu else "needs a CUDA GPU")


def _check_config(code: str, which: str, text: str) -> None:
    import attnkit

    body = text.split("#")[0].strip()
    rest = "..." in body
    cfg = json.loads(re.sub(r",\s*\.\.\.\s*}", "}", body))
    cfg = {**_llama(), **cfg} if rest else cfg
    if which == "before":
        with pytest.raises(AttnkitError) as info:
            attnkit.plan(cfg, "h100")
        assert info.value.code == code, info.value
    else:
        assert attnkit.plan(cfg, "h100").ok


def _check_python(code: str, which: str, text: str, request) -> None:
    ns = dict(request.getfixturevalue("namespace"))
    if 'load_backend("triton' in text:
        from attnkit.backends._triton import interpreting

        if not interpreting():      # the namespace's tensors are on the CPU
            pytest.skip("Triton runs CPU tensors only through the interpreter (a machine without CUDA)")
    ns["alloc"] = ns["PageAllocator"](num_pages=8)          # fresh: an example may free it
    ns["alloc"].allocate("r0", num_tokens=20, page_size=16)
    if "LLM(" in text:
        request.getfixturevalue("tiny_llama")
        from attnkit.runner import LLM
        ns["LLM"] = LLM
    source = text.split("  #")[0] if "  #" in text else text
    try:
        exec(compile(source, f"<{code} {which}>", "exec"), dict(ns))
    except NameError as exc:
        pytest.fail(f"{code} {which} uses a name the namespace lacks ({exc}): add it, or list the "
                    "example in NOT_RUN with why")
    except AttnkitError as err:
        assert which == "before" and err.code == code, err
        return
    assert which == "after", f"{code} before raised nothing"


@pytest.fixture(scope="module")
def namespace():
    """Runtime names plus small steps on CPU (fp32; Triton kernels through the interpreter):
    ``layers``, ``alloc`` (r0 holds 20 tokens), ``backend`` (torch_native), ``reqs``, ``cfg``;
    an MHA step ``layer, q, k, v, cache, meta, step`` (head_dim 64) and ``layer32 ...`` (32);
    an MLA step ``mla_layer, mla_q, latent, mla_cache, mla_meta`` (latent 64+16), the same
    with an fp8_e5m2 cache (``mla_cache_e5m2``), with 128-key pages (``mla_cache_p128``,
    ``mla_meta_p128``), a sliding-window MLA layer (``mla_swa_layer``), and latent 384+64
    (``mla384_*``); ``verify_meta`` (a VERIFY step)."""
    pytest.importorskip("torch")
    import attnkit
    from attnkit import runtime
    from attnkit.model.spec import MLAConfig, ModelAttention
    from factories import make_case, make_layer

    ns = {name: getattr(runtime, name) for name in runtime.__all__}
    steps = dict(prefix_lens=[16, 0], new_lens=[1, 8])
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64)
    case = make_case(layer, **steps, page_size=16)
    narrow = make_case(make_layer(num_heads=4, num_kv_heads=2, head_dim=32), **steps)
    verify = make_case(layer, prefix_lens=[16], new_lens=[3], mode="verify")
    mla = make_layer(kind="mla", num_heads=4)
    mla_case = make_case(mla, **steps)
    wide = make_layer(kind="mla", num_heads=4, mla=MLAConfig(kv_lora_rank=384, qk_rope_head_dim=64,
                                                             qk_nope_head_dim=32, v_head_dim=32))
    wide_case = make_case(wide, **steps)
    p128 = make_case(mla, **steps, page_size=128)
    backend = ns["load_backend"]("torch_native")
    alloc = ns["PageAllocator"](num_pages=8)
    alloc.allocate("r0", num_tokens=20, page_size=16)
    import torch

    # the varlen call: an encoder layer and 14 packed rows (two sequences, 5 + 9)
    encoder = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, role="encoder")
    gen = torch.Generator().manual_seed(0)
    packed = {f"packed_{n}": torch.randn(14, h, 64, generator=gen) for n, h in (("q", 4), ("k", 2), ("v", 2))}
    ns.update(torch=torch, encoder_layer=encoder, **packed)
    ns.update(attnkit=attnkit, ModelAttention=ModelAttention, layers=[layer.spec], alloc=alloc,
              backend=backend, layer=case.layer, q=case.q, k=case.k, v=case.v, cache=case.cache,
              meta=case.meta, step=backend.prepare(case.meta, case.cache), T=case.q.shape[0], H_q=4,
              D=64, reqs=case.requests, cfg=_llama(),
              layer32=narrow.layer, q32=narrow.q, k32=narrow.k, v32=narrow.v, cache32=narrow.cache,
              verify_meta=verify.meta,
              mla_layer=mla, mla_q=mla_case.q, latent=mla_case.k, mla_cache=mla_case.cache,
              mla_meta=mla_case.meta, mla_cache_e5m2=make_case(mla, **steps, kv_dtype="fp8_e5m2").cache,
              mla_cache_p128=p128.cache, mla_meta_p128=p128.meta,
              mla_swa_layer=make_layer(kind="mla", num_heads=4, sliding_window=8),
              mla384_layer=wide, mla384_q=wide_case.q, latent384=wide_case.k, mla384_cache=wide_case.cache,
              mla384_meta=wide_case.meta,
              gemma2_layer=make_layer(num_heads=4, num_kv_heads=2, head_dim=64, logit_softcap=5.0))
    transformers = pytest.importorskip("transformers")
    ns.update(AutoConfig=transformers.AutoConfig, p=str(_scratch_model()))
    return ns


def _scratch_model() -> Path:
    """A directory with the llama preset's config.json, for AutoConfig.from_pretrained(p)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="catalog-model-"))
    (path / "config.json").write_text(json.dumps(_llama()))
    return path


@pytest.fixture(scope="module")
def tiny_llama(scratch):
    """./tiny-llama (and ./llama): a random-weight two-layer llama saved with transformers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=256)
    config.vocab_size = 16384      # room for the ids a real tokenizer gives (15043: "Hello")
    transformers.LlamaForCausalLM(config).save_pretrained(scratch / "tiny-llama")
    if not (scratch / "llama").exists():
        (scratch / "llama").symlink_to(scratch / "tiny-llama")
    return scratch / "tiny-llama"


def test_not_run_names_only_catalogued_examples():
    stale = sorted(c for c, _ in (*NOT_RUN, *DRIFTING) if c not in CATALOG)
    assert not stale, f"NOT_RUN lists codes the catalog no longer has: {stale}"


def test_the_check_catches_an_example_that_exits_0(scratch, monkeypatch, request):
    """The AK303 example as the issue found it planned (exit 0): as a 'before' it must fail."""
    monkeypatch.chdir(scratch)
    rc, out = _run_commands("attnkit plan deepseek-v3 --device h100 --page-size 128", monkeypatch, request)
    assert rc == 0 and "AK303" not in re.findall(r"AK\d{3}", out)
