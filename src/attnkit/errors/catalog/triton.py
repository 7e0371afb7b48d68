"""4xx (AK450-AK459): inputs the triton backend (paged MHA/GQA kernels) cannot run."""
from attnkit.errors.catalog import entry

_PLAN = "Let `attnkit plan` pick the backend: it reads triton's declaration."

ENTRIES = [
    entry(
        "AK450", "Layer kind not served by the triton backend",
        meaning="The triton backend attends over per-head K/V pages (MHA, GQA, MQA) of decoder or "
                "encoder self-attention. MLA latent caches, cross-attention over encoder pages and "
                "dual chunk attention are other kernels; a layer feature outside the triton "
                "declaration is refused rather than ignored.",
        trigger="TritonBackend.forward with an MLA layer, a cross-attention layer, a layer with "
                "a dual_chunk config, or a layer needing a feature triton does not declare.",
        situations=["An MLA model (DeepSeek-V3) forced onto --attention-backend triton.",
                    "An encoder-decoder model whose cross-attention layers reach triton.",
                    "Qwen2.5-1M with dual chunk attention on and --attention-backend triton."],
        solutions=["Use triton_mla for MLA models, dual_chunk for dual chunk attention.",
                   "Serve cross-attention layers with sdpa or torch_native.", _PLAN],
        before="b = load_backend(\"triton\"); b.forward(mla_q, latent, None, mla_layer, mla_cache, b.prepare(mla_meta, mla_cache))   # an MLA layer",
        after="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_layer, mla_cache, b.prepare(mla_meta, mla_cache))",
        related=("AK420", "AK460"),
    ),
    entry(
        "AK451", "dtype or KV-cache dtype not served by the triton backend",
        meaning="q/k/v must be fp32, fp16 or bf16; the KV cache fp32, fp16, bf16, fp8_e4m3 or "
                "fp8_e5m2 (fp8 pages are read back as stored * scale).",
        trigger="TritonBackend.forward with another compute dtype or KV-cache dtype.",
        situations=["q handed in as float64 from a reference computation.",
                    "An int8 KV cache from another engine."],
        solutions=["Cast q, k and v to the model's compute dtype (bf16 on GPUs).",
                   "Use --kv-cache-dtype fp8_e4m3 for a compressed cache."],
        before="backend.forward(q.double(), k.double(), v.double(), layer, cache, step)",
        after="backend.forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), layer, cache, step)",
        related=("AK410",),
    ),
    entry(
        "AK452", "The triton backend needs a CUDA device",
        meaning="The triton kernels are compiled for NVIDIA GPUs; tensors on the CPU can only run "
                "them through the Triton interpreter (TRITON_INTERPRET=1, slow, for tests).",
        trigger="TritonBackend.forward with tensors on a non-CUDA device and the interpreter off.",
        situations=["A CPU-only machine with --attention-backend triton.",
                    "The KV cache allocated on the CPU while the model runs on a GPU."],
        solutions=["Run on a CUDA GPU, with the cache and tensors on it.",
                   "On CPUs use torch_native or sdpa.",
                   "For kernel tests on a CPU, set TRITON_INTERPRET=1 before triton is imported."],
        before="b = load_backend(\"triton\"); b.forward(q, k, v, layer, cache, b.prepare(meta, cache))   # CPU tensors, TRITON_INTERPRET unset",
        after="TRITON_INTERPRET=1 python my_kernel_test.py   # or CUDA tensors",
        related=("AK412",),
    ),
    entry(
        "AK453", "Head dim not served by the triton backend",
        meaning="The kernels hold a whole head row of q, K and V in one tile padded to a power of "
                "two. Head dims above 256 do not fit one program's on-chip memory; of the rest, "
                "only the declared head dims (64, 80, 96, 128, 192, 256) are built and tested on "
                "GPUs, and others are refused rather than run unverified.",
        trigger="TritonBackend.forward with a head_dim outside the declaration or a v_head_dim "
                "above 256; DualChunkBackend(impl='triton') with a head or value dim above 256 "
                "(its 'auto' takes the torch path there).",
        situations=["A model with 512-wide heads.", "A small research model with 48-wide heads.",
                    "An MLA layer expanded to MHA form by hand."],
        solutions=["Serve the layer with sdpa or torch_native, which take any head dim.", _PLAN],
        before="b = load_backend(\"triton\"); b.forward(q32, k32, v32, layer32, cache32, b.prepare(meta, cache32))   # head_dim 32",
        after="b = load_backend(\"sdpa\"); b.forward(q32, k32, v32, layer32, cache32, b.prepare(meta, cache32))",
        related=("AK420",),
    ),
]
