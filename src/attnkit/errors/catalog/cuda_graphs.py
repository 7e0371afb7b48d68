"""AK457-AK458 (backends' capture contract) and AK489 (the runner's CUDA graphs): what a
captured decode step refuses."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK457", "Backend or step cannot be captured in a CUDA graph",
        meaning="A CUDA graph replays the kernels it recorded with the launch parameters of the "
                "capture, so a captured decode step must read its per-step metadata from static "
                "buffers and decide nothing on the host from their values. Backends that "
                "declare 'cuda_graph' plan such a step (AttentionBackend.prepare_static); the "
                "others loop over requests or size kernels from host-side lengths and refuse. "
                "A static step must be a DECODE step over dense int32 lengths and tables and "
                "int64 slots (StaticDecode builds them), and max_seq_len must lie between its "
                "longest KV and what its block tables address.",
        trigger="prepare_static on a backend without the capture contract (torch_native, sdpa, "
                "dual_chunk's torch path), on a step that is not DECODE or whose tensors are not "
                "static buffers, or with max_seq_len out of range; dual_chunk refusing to leave "
                "its Triton path for a static step.",
        situations=["An engine asked for CUDA graphs with --decode-attention-backend sdpa.",
                    "dual_chunk with impl='torch', or on the CPU, asked for a static step.",
                    "Metadata from build_batch (int64 tables built per step) handed to "
                    "prepare_static instead of StaticDecode.meta(...)."],
        solutions=["Decode with a backend that declares cuda_graph (`attnkit backends` lists "
                   "them; `attnkit plan ... --cuda-graph on` picks one).",
                   "Build static metadata with attnkit.backends.static.StaticDecode.",
                   "Run the step eagerly (prepare + forward) where graphs are not needed."],
        before='load_backend("sdpa").prepare_static(static.meta(8), cache, max_seq_len=4096)',
        after='load_backend("triton").prepare_static(static.meta(8), cache, max_seq_len=4096)',
        related=("AK109", "AK458", "AK489"),
    ),
    entry(
        "AK458", "Request does not fit the static decode buffers",
        meaning="StaticDecode allocates its buffers once, for max_batch rows of at most "
                "max_pages pages each, and keeps one scratch page for padded rows. A refill "
                "that needs more rows, a longer block table, or that names the scratch page "
                "(which padded rows write) would overrun the buffers or corrupt a request's KV.",
        trigger="StaticDecode(...) with a size that is not an int >= 1; fill / meta with a "
                "bucket outside 1..max_batch, more requests than the bucket, a request that is "
                "not one new token, whose KV needs more than max_pages pages, whose block table "
                "lacks a page or names the scratch page.",
        situations=["A sequence grew past the length the engine captured its graphs for.",
                    "More running requests than the largest captured bucket."],
        solutions=["Size StaticDecode for the longest sequence and the largest batch you decode "
                   "(the runner uses the cache's room and max_num_seqs).",
                   "Never hand the scratch page to a request (the runner's page allocator keeps it "
                   "apart).", "Run such a step eagerly."],
        before="static.fill(8, requests_of_9)",
        after="static.fill(16, requests_of_9)",
        related=("AK457",),
    ),
    entry(
        "AK489", "CUDA graphs not available for this engine",
        meaning="The runner captures decode steps as CUDA graphs only on a CUDA device and with "
                "a decode backend that implements the capture contract (declares 'cuda_graph'; "
                "planned with --cuda-graph on, or chosen by --cuda-graph auto). It refuses "
                "rather than silently decoding eagerly when graphs were asked for.",
        trigger="LLM(..., cuda_graph='on') or Engine.from_pretrained(..., cuda_graph=True) on "
                "the CPU or MPS; graphs asked for with a decode backend that cannot be captured "
                "(an AttentionBackend object such as torch_native or sdpa, which refuses "
                "prepare_static with AK457); a capture that fails on the GPU (with "
                "--cuda-graph auto the engine then decodes eagerly and warns instead); "
                "cuda_graph=True with tp_size > 1 (the runner does not capture decode graphs "
                "under tensor parallelism: collectives inside a graph need NCCL's capture "
                "support, and it is not proven here; --cuda-graph auto decodes eagerly with a "
                "warning). graph_capture=False (the static path run eagerly, for tests) runs "
                "anywhere.",
        situations=["`attnkit generate ./model --device cpu --cuda-graph on`.",
                    "A hand-made backend object passed as attention_backend with cuda_graph=True.",
                    "`attnkit generate ./llama --tp-size 2 --cuda-graph on`."],
        solutions=["Use --cuda-graph auto (graphs where they can run, eager elsewhere) or off.",
                   "Run on a CUDA GPU with a decode backend that declares cuda_graph."],
        before="attnkit generate ./tiny-llama --device cpu --cuda-graph on --prompt-ids 1,2",
        after="attnkit generate ./tiny-llama --device cpu --prompt-ids 1,2",
        related=("AK457", "AK109"),
    ),
]
