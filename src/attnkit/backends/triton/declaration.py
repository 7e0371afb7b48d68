"""triton: paged attention in Triton kernels — an extend kernel over the block table and a
split-KV (flash-decoding) decode kernel, GQA-grouped — and its kernel variants.

Every entry below is run on a GPU by tests/conformance and tests/triton_kernels (marker gpu); see
benchmarks/NOTES-triton.md for what was measured where. Torch-free: the planner reads it.
Variants (registry/kernels.py): the plan picks one per role and measured bucket from the device
profile (`attnkit tune` times each); without a plan the backend runs the first that takes the
step in the order below. split_fixed and paged_fixed declare batch_invariant and
deterministic (tests/conformance/test_bitwise.py proves them: interpreter and GPU); a plan with
``--require batch-invariant`` runs only them.
"""
from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import HALF_DTYPES as HALF, NUMERICS, BackendDeclaration, Capabilities
from attnkit.registry.kernels import KernelVariant

EXTEND_ROLES = ("prefill", "extend")
PLAIN = frozenset({"sliding_window", "logit_softcap", "sinks", "chunked_local"})
# the Gluon varlen forms take self-attention only (a sequence's keys are its queries): a
# cross-attention layer's varlen calls run varlen_tile (varlen_path.runnable reads this)
SELF_ONLY = frozenset({"cross_attention"})

VARIANTS = (
    # decode
    KernelVariant("split", ("decode",), "split-KV decode; the new K/V written by a launch of its own"),
    KernelVariant("split_write", ("decode",), "split-KV decode that writes the new K/V inside the "
                  "kernel (one launch fewer); 16-bit / fp32 caches of the compute dtype"),
    KernelVariant("split_merge", ("decode",), "split_write whose last split program per (request, "
                  "KV head) also merges the splits: one launch a step"),
    KernelVariant("split_fixed", ("decode",), "split-KV decode in splits of a fixed number of keys "
                  "(SPLIT_KEYS, configs.py) from each request's own first key, merged in key order: a "
                  "request's bits do not depend on its batch", numerics=frozenset(NUMERICS)),
    KernelVariant("split_heads", ("decode",), "one program per (request, split) reads every KV "
                  "head of its keys (whole pages), writes the new K/V and merges in the kernel: "
                  "one launch; 16-bit caches of the compute dtype, H_kv x 16 x D <= 16384",
                  dtypes=HALF, kv_cache_dtypes=HALF, head_dims=(64, 128), excludes=PLAIN),
    KernelVariant("stream", ("decode",), "one program per (request, KV head) over all its keys "
                  "(split only where those pairs leave SMs idle), K/V pages streamed by a loader "
                  "warp through a ring of TMA copies (Gluon), the new K/V written in the kernel; "
                  "16-bit caches of the compute dtype, pages of 16 / 32 / 64",
                  compute_capability=((9, 0), (9, 0)), triton=("3.6", "3.7"), dtypes=HALF,
                  kv_cache_dtypes=HALF, head_dims=(64, 128), page_multiple=16, excludes=PLAIN),
    # prefill and extend
    KernelVariant("paged", EXTEND_ROLES, "every key read through the block table"),
    KernelVariant("paged_new_kv", EXTEND_ROLES, "cached prefix through the block table, the new "
                  "tokens' K/V from the step's inputs; caches of the compute dtype"),
    KernelVariant("tma", EXTEND_ROLES, "tensor-descriptor (TMA) kernel: a one-request fresh prefill "
                  "reads the step's K/V directly, any other step a gathered copy of its keys",
                  compute_capability=((9, 0), None), dtypes=HALF, head_dims=(64, 128, 256),
                  excludes=frozenset({"chunked_local"})),
    KernelVariant("gluon", ("prefill",), "Gluon ping-pong kernel (two warpgroups, loader warp) for "
                  "one fresh causal request", compute_capability=((9, 0), (9, 0)),
                  triton=("3.6", "3.7"), dtypes=HALF, kv_cache_dtypes=HALF, head_dims=(64, 128, 256),
                  excludes=PLAIN, causal_only=True, step="one_fresh_request"),
    KernelVariant("paged_fixed", EXTEND_ROLES, "paged whose one-token rows over a cached prefix (a "
                  "MIXED step's decodes) run split_fixed, as their DECODE steps do: a request's bits "
                  "do not depend on its batch", numerics=frozenset(NUMERICS)),
    KernelVariant("gluon_rows", EXTEND_ROLES, "the Gluon ping-pong kernel over per-request query "
                  "blocks (prefill_gluon_rows.py): a fresh prefill of any number of requests reads "
                  "the step's K/V in place, a step over a cached prefix a gathered copy of its keys "
                  "(the mask aligned to the last key); a program per (query block, head)",
                  compute_capability=((9, 0), (9, 0)), triton=("3.6", "3.7"), dtypes=HALF,
                  kv_cache_dtypes=HALF, head_dims=(64, 128, 256), excludes=PLAIN, causal_only=True),
    KernelVariant("gluon_rows_persistent", EXTEND_ROLES, "gluon_rows as a persistent kernel: a "
                  "program per SM walking the (query block, head) items, each item's loads under "
                  "the previous one's epilogue", compute_capability=((9, 0), (9, 0)),
                  triton=("3.6", "3.7"), dtypes=HALF, kv_cache_dtypes=HALF, head_dims=(64, 128, 256),
                  excludes=PLAIN, causal_only=True),
    KernelVariant("gluon_rows_chain", EXTEND_ROLES, "gluon_rows persistent and chained "
                  "(prefill_gluon_chain.py): each item's first Q.K issued in the previous item's "
                  "last tile (two Q buffers), the items dealt to the programs by a host schedule "
                  "(rows_schedule.py: longest first)", compute_capability=((9, 0), (9, 0)),
                  triton=("3.6", "3.7"), dtypes=HALF, kv_cache_dtypes=HALF, head_dims=(64, 128),
                  excludes=PLAIN, causal_only=True),
    # the varlen call (packed non-causal sequences without a KV cache: a DiT, a vision tower);
    # unmeasured, the Gluon forms first where they can take the call (results/sweep_dit.md holds
    # the sweep that ordered them), the tile for every other call
    KernelVariant("varlen_gluon", ("varlen",), "the Gluon ping-pong kernel's non-causal path "
                  "(prefill_gluon.py), a program per (query block, head), a head's blocks one after "
                  "another, per sequence; self-attention without a key mask",
                  compute_capability=((9, 0), (9, 0)), triton=("3.6", "3.7"), dtypes=HALF,
                  head_dims=(64, 128, 256), excludes=SELF_ONLY),
    KernelVariant("varlen_gluon_persistent", ("varlen",), "the same kernel persistent "
                  "(prefill_gluon_persistent.py): a program per SM walking the blocks, heads "
                  "fastest, each block's loads under the previous one's epilogue",
                  compute_capability=((9, 0), (9, 0)), triton=("3.6", "3.7"), dtypes=HALF,
                  head_dims=(64, 128, 256), excludes=SELF_ONLY),
    KernelVariant("varlen_gluon_split", ("varlen",), "the persistent kernel with a split tail, "
                  "head-major: the last, partial wave's (query block, head) items cut along the keys "
                  "and dealt out evenly to every program, the pieces merged by a second kernel "
                  "(split_tail.py)",
                  compute_capability=((9, 0), (9, 0)), triton=("3.6", "3.7"), dtypes=HALF,
                  head_dims=(64, 128, 256), excludes=SELF_ONLY),
    KernelVariant("varlen_tile", ("varlen",), "one program per (query block, sequence, head) "
                  "walking its sequence's keys (triton/varlen.py); any head dim, key padding masks"),
)

DECLARATION = BackendDeclaration(
    name="triton",
    impl="attnkit.backends.triton.backend:TritonBackend",
    description="Triton paged attention: extend over [cached prefix + new tokens] through the "
                "block table, split-KV decode with one program per KV-head group; GQA, sliding "
                "window, softcap, sinks, fp8 KV.",
    capabilities=Capabilities(
        platforms=("cuda",),
        compute_capability=((8, 0), None),
        kinds=("mha",),
        head_dims=(64, 80, 96, 128, 192, 256),
        v_head_dims=(64,),               # narrower values: tests/triton_kernels/test_triton_extend.py
        dtypes=("fp16", "bf16", "fp32"),
        kv_cache_dtypes=("fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2"),
        page_sizes="any",                # tokens are gathered one by one through the block table
        phases=("prefill", "decode"),
        features=frozenset({"sliding_window", "logit_softcap", "sinks", "non_causal", "verify",
                            "chunked_local", "cuda_graph", "varlen"}),
        requires=("torch", "triton"),
        verified=(H200_2026_11_29,),
    ),
    variants=VARIANTS,
    launch_config="attnkit.backends.triton.configs:launch_config",
)
