"""4xx (AK400-AK439): runtime inputs — pages, batch metadata, tensors handed to a backend."""
from attnkit.errors.catalog import entry

_FIX_INPUTS = "Build the batch with attnkit.backends.batch.build_batch instead of by hand."

ENTRIES = [
    entry(
        "AK400", "Out of KV-cache pages",
        meaning="The page allocator cannot give a request the pages it needs: fewer pages are free "
                "than the request asks for.",
        trigger="PageAllocator.allocate or grow asked for more pages than are free.",
        situations=["Too many concurrent requests for the cache size.",
                    "A long prompt on a small cache.", "Finished requests were never freed."],
        solutions=["Free finished requests (PageAllocator.free).",
                   "Give the cache more pages (num_pages) or admit fewer requests per step.",
                   "Use a larger page budget: more GPU memory for the KV cache."],
        before="PageAllocator(num_pages=4).allocate('r0', num_tokens=100, page_size=16)",
        after="PageAllocator(num_pages=8).allocate('r0', num_tokens=100, page_size=16)",
        related=("AK401",),
    ),
    entry(
        "AK401", "Page ownership error",
        meaning="A request id was used in a way its page ownership does not allow: freed twice, "
                "grown or freed without being allocated, or allocated twice.",
        trigger="PageAllocator.allocate/grow/free with a request id in the wrong state.",
        situations=["A request is freed on both the finish and the abort path.",
                    "A request id is reused before its pages were freed."],
        solutions=["Free each request exactly once.", "Use unique request ids, or free before reuse."],
        before="alloc.free('r0'); alloc.free('r0')",
        after="alloc.free('r0')",
        related=("AK400",),
    ),
    entry(
        "AK405", "Invalid batch request",
        meaning="A per-request input of the batch builder or the page allocator is impossible: "
                "a negative prefix, encoder length or token count, no new tokens, a page size "
                "below 1, a count or page id that is not an int, a page id beyond the int32 "
                "range of block tables, a request that is not a Request / dict / tuple of its "
                "fields, or a block-table row too short for the KV length. Also a BatchMetadata "
                "made by hand with such values (not ints, per-request counts of different "
                "lengths, a slot count other than the new tokens'), or one whose field was set "
                "after it was made: it is read-only, since its device tensors are built from its "
                "host values.",
        trigger="build_batch, BatchMetadata(...), PageAllocator.allocate or PageAllocator.grow "
                "was given such an input, or a BatchMetadata field was assigned.",
        situations=["The block-table row was not grown after new tokens were scheduled.",
                    "A request with zero new tokens was left in the batch.",
                    "A request tuple missing a field, or a dict with a misspelt field name.",
                    "Counts computed as floats (e.g. a division) instead of ints."],
        solutions=["Grow the request's pages before building the batch (PageAllocator.grow).",
                   "Drop requests with no new tokens from the step.",
                   "Build requests as Request(prefix_len=..., num_new=..., block_table=[...]) "
                   "with int counts and page ids taken from the allocator."],
        before="build_batch([Request(prefix_len=16, num_new=1, block_table=[3])], page_size=16)",
        after="build_batch([Request(prefix_len=16, num_new=1, block_table=[3, 7])], page_size=16)",
        related=("AK406", "AK414"),
    ),
    entry(
        "AK406", "Forward mode does not fit the batch",
        meaning="The requested forward mode is unknown or contradicts the requests: modes are "
                "extend, decode, mixed, verify and idle; DECODE needs exactly one new token per "
                "request, IDLE needs an empty batch, VERIFY needs at least one draft token.",
        trigger="build_batch(..., mode=...) with an unknown mode or requests that do not fit it.",
        situations=["DECODE asked for a batch that still has prompt tokens (it is MIXED).",
                    "A backend that serves decode only was handed a prefill step.",
                    "mode='prefill' (the mode is called 'extend')."],
        solutions=["Leave mode unset so the builder infers it.",
                   "Pass a ForwardMode member or one of its values: extend, decode, mixed, "
                   "verify, idle.",
                   "Split prompt and decode requests into separate steps."],
        before="build_batch(reqs, page_size=16, mode=ForwardMode.DECODE)  # one request has 8 new tokens",
        after="build_batch(reqs, page_size=16)  # inferred: MIXED",
        related=("AK405", "AK420"),
    ),
    entry(
        "AK407", "Invalid backend option",
        meaning="A backend was constructed with an option value it does not know (for example "
                "torch_native's mla_form or a Triton kernel variant), or a launch setting its "
                "kernels cannot take (a tile size that is not a power of two, zero splits or "
                "warps): refused when the backend is made, not at its first forward.",
        trigger="load_backend(name, option=value) or the backend class called with such a value.",
        situations=["A typo in an option value.",
                    "An option value from a newer attnkit version."],
        solutions=["Use a value the message allows (one it lists, or of the kind it names).",
                   "Leave the option out to get the backend's default."],
        before='load_backend("torch_native", mla_form="absorb")',
        after='load_backend("torch_native", mla_form="absorbed")',
        related=("AK420",),
    ),
    entry(
        "AK410", "Tensor dtype mismatch",
        meaning="A tensor handed to attention has a dtype other than the one required: q, k and v "
                "must share the compute dtype; index tensors must be integers.",
        trigger="Runtime validation before the kernel found a wrong dtype.",
        situations=["q in bfloat16 but k in float32 after a projection in another precision.",
                    "Block tables built as float tensors."],
        solutions=["Cast q, k, v to the model's compute dtype.", _FIX_INPUTS],
        before="backend.forward(q.bfloat16(), k.float(), v.float(), layer, cache, step)",
        after="backend.forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), layer, cache, step)",
        related=("AK411", "AK412"),
    ),
    entry(
        "AK411", "Tensor shape mismatch",
        meaning="A tensor handed to attention has the wrong shape: q must be [T, H_q, D], k "
                "[T, H_kv, D], v [T, H_kv, D_v] (MLA: k is the latent [T, L + R], v is None), with "
                "T the number of new tokens of the batch.",
        trigger="Runtime validation before the kernel found a wrong shape.",
        situations=["q passed flat as [T, H_q * D] instead of [T, H_q, D].",
                    "The token count of q differs from the batch metadata (a stale step)."],
        solutions=["Reshape q/k/v to [T, heads, head_dim].",
                   "Rebuild the batch metadata for this step."],
        before="backend.forward(q.view(T, -1), k, v, layer, cache, step)",
        after="backend.forward(q.view(T, H_q, D), k, v, layer, cache, step)",
        related=("AK410", "AK413"),
    ),
    entry(
        "AK412", "Tensor device mismatch",
        meaning="Attention inputs live on different devices (or not on the cache's device).",
        trigger="Runtime validation before the kernel found a tensor on another device.",
        situations=["The KV cache was allocated on CPU while the model runs on CUDA.",
                    "Batch metadata built with device='cpu' for a GPU step."],
        solutions=["Build the cache and the batch metadata on the model's device."],
        before="build_batch(reqs, page_size=16, device='cpu')  # model on cuda",
        after="build_batch(reqs, page_size=16, device='cuda')",
        related=("AK410",),
    ),
    entry(
        "AK413", "Head count mismatch",
        meaning="The number of query or KV heads of a tensor, the layer and the cache disagree, or "
                "the query heads are not a multiple of the KV heads.",
        trigger="Runtime validation before the kernel compared head counts.",
        situations=["Tensor parallelism split the query heads but the layer still has full counts.",
                    "A GQA model's KV heads were repeated before the call."],
        solutions=["Pass per-rank head counts in the layer spec.",
                   "Hand K/V with H_kv heads; do not repeat them for GQA."],
        before="LayerAttention(layer_id=0, num_heads=32, num_kv_heads=8, head_dim=128)  # tp=2",
        after="LayerAttention(layer_id=0, num_heads=16, num_kv_heads=4, head_dim=128)",
        related=("AK411",),
    ),
    entry(
        "AK414", "Block table entry out of range",
        meaning="A block table names a page that does not exist in the cache, or a request's row "
                "has a padding entry (-1) where its KV length needs a page.",
        trigger="Runtime validation of the batch metadata (once per step).",
        situations=["Block tables from a larger cache reused with a smaller one.",
                    "A row was not grown after the request's KV length increased."],
        solutions=["Take page ids from the allocator of this cache.",
                   "Grow each request's row to ceil(seq_len / page_size) pages."],
        before="cache = PagedKVCache(layers, num_pages=8, ...); block_tables = [[3, 12]]",
        after="cache = PagedKVCache(layers, num_pages=16, ...); block_tables = [[3, 12]]",
        related=("AK405", "AK415"),
    ),
    entry(
        "AK415", "Slot mapping out of range",
        meaning="A new token's cache slot is outside the cache or is not the slot its position maps "
                "to through its request's block table. A negative slot counts too: torch would "
                "index from the end and write into another request's page.",
        trigger="Runtime validation of the batch metadata (once per step), or "
                "PagedKVCache.write(layer_id, slot_mapping, k, v) with such a slot (nothing is "
                "written then).",
        situations=["Slots computed with another page size than the cache's.",
                    "Slots computed from stale block tables.",
                    "-1 used as a padding slot for tokens that should not be stored."],
        solutions=["Compute slot = page * page_size + offset from the current block table.",
                   _FIX_INPUTS],
        before="slot = position  # ignores paging",
        after="slot = block_table[position // page_size] * page_size + position % page_size",
        related=("AK414", "AK416"),
    ),
    entry(
        "AK416", "Slot mapping overlap",
        meaning="Two new tokens of the step write the same cache slot, so one would silently "
                "overwrite the other (often: two requests share a page).",
        trigger="Runtime validation of the batch metadata (once per step).",
        situations=["Two requests were handed the same page.", "A page was freed while still in use."],
        solutions=["Give every request its own pages (PageAllocator).",
                   "Free a request's pages only after its last step."],
        before="block_tables = [[3], [3]]",
        after="block_tables = [[3], [5]]",
        related=("AK415", "AK401"),
    ),
    entry(
        "AK417", "query_start_loc inconsistent",
        meaning="The cumulative query offsets do not agree with the per-request new-token counts "
                "(seq_lens - prefix_lens) or with the number of query tokens. No longer raised: "
                "BatchMetadata builds query_start_loc from those counts, so the two cannot "
                "disagree (a request without new tokens is AK405).",
        trigger="Runtime validation of the batch metadata (once per step), before BatchMetadata "
                "built its tensors from its host values.",
        situations=["query_start_loc built without the leading 0.",
                    "prefix_lens not updated after the previous step."],
        solutions=["query_start_loc = [0, cumsum(seq_lens - prefix_lens)...].", _FIX_INPUTS],
        before="query_start_loc = [3, 4]",
        after="query_start_loc = [0, 3, 4]",
        related=("AK411",),
    ),
    entry(
        "AK418", "Cache does not hold this layer",
        meaning="The KV cache has no buffer for the layer, or its layout (MHA K/V pages vs MLA "
                "latent pages, head counts, head dims, page size) differs from the layer or batch.",
        trigger="Runtime validation compared the layer and batch with the cache.",
        situations=["The cache was built for other layers than the ones run.",
                    "Batch metadata built with a page size other than the cache's."],
        solutions=["Build the cache from the same LayerAttention list the model runs.",
                   "Use the cache's page_size when building the batch."],
        before="build_batch(reqs, page_size=32)  # cache.page_size == 16",
        after="build_batch(reqs, page_size=cache.page_size)",
        related=("AK413",),
    ),
    entry(
        "AK419", "Invalid layer spec",
        meaning="A LayerAttention handed to a backend holds a value no backend can serve "
                "consistently: an unknown kind or role, a sliding window below 1 (the window "
                "counts the query itself, so 1 means the token sees only itself), a soft-cap that "
                "is not positive, an MLA layer without its MLA sizes, or an attention_chunk "
                "(chunked local attention) below 1 or on a layer that is not a causal decoder "
                "layer (the chunk mask is causal by definition).",
        trigger="Runtime validation before the kernel, per layer.",
        situations=["A window of 0 meant as 'no window' (use None).",
                    "A spec built by hand with kind 'gqa' (GQA is mha with fewer KV heads).",
                    "attention_chunk set on an encoder or cross-attention layer."],
        solutions=["Use None for no sliding window, no soft-cap or no attention chunk.",
                   "Use kind 'mha' or 'mla' and role 'decoder', 'encoder' or 'cross'.",
                   "Build specs from the model config (attnkit.model.load_model)."],
        before="LayerAttention(layer_id=0, num_heads=8, num_kv_heads=2, head_dim=64, sliding_window=0)",
        after="LayerAttention(layer_id=0, num_heads=8, num_kv_heads=2, head_dim=64, sliding_window=None)",
        related=("AK413", "AK420"),
    ),
    entry(
        "AK420", "Input outside the backend's declared capabilities",
        meaning="The backend was handed an input its declaration does not cover: a feature, kind "
                "(MHA/MLA), dtype, KV-cache dtype, page size, head dim, phase or device it does not "
                "support. Running anyway would give wrong numbers or crash in a kernel.",
        trigger="Runtime check of the layer and batch against the backend's declaration.",
        situations=["A decode-only backend handed a prefill step outside a hybrid.",
                    "A sliding-window layer sent to a backend without sliding_window.",
                    "An fp8 KV cache used with a backend that reads only bf16 pages."],
        solutions=["Let `attnkit plan` choose the backend for this model and device.",
                   "Run `attnkit backends` to see which backends support the feature.",
                   "Use a HybridBackend to serve prefill and decode with different backends."],
        before="load_backend(\"dual_chunk\").prepare(verify_meta, cache)   # a VERIFY step",
        after="load_backend(\"sdpa\").prepare(verify_meta, cache)   # sdpa declares verify",
        related=("AK406",),
    ),
    entry(
        "AK430", "Invalid KV cache configuration",
        meaning="PagedKVCache was built with an argument it cannot use: num_pages or page_size "
                "not an int >= 1, a dtype that is neither a torch dtype nor one of the names "
                "fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 (or a spelling `attnkit plan --kv-cache-dtype` "
                "takes: fp8 is fp8_e4m3, bfloat16 is bf16 ...), or a k/v scale that is not a finite number > 0 or names a layer "
                "the cache does not hold. fp8 pages store value / scale, so a zero, negative or "
                "NaN scale would silently corrupt every value written. Also layers that are not "
                "LayerAttention values or repeat a layer id, and a device this process cannot "
                "put tensors on (cuda without CUDA, mps without MPS, a misspelt name).",
        trigger="PagedKVCache(layers, num_pages=..., page_size=..., dtype=..., k_scales=..., "
                "v_scales=..., device=...) with such a value.",
        situations=["dtype='fp4' (no such KV dtype).",
                    "dtype='int8' (no such KV dtype name: there is no int8 dequantisation path).",
                    "A calibration that produced a scale of 0 for an all-zero layer.",
                    "num_pages computed as 0 for a tiny memory budget."],
        solutions=["Use one of the dtype names the message lists.",
                   "Give every scale a positive finite value (1.0 when uncalibrated).",
                   "Key k_scales / v_scales by the layer ids of the layers passed in.",
                   "Give the cache at least one page of at least one token."],
        before="PagedKVCache(layers, num_pages=64, page_size=16, dtype='int8')",
        after="PagedKVCache(layers, num_pages=64, page_size=16, dtype='fp8')   # fp8 is fp8_e4m3, as in attnkit plan",
        related=("AK418", "AK419", "AK304", "AK431"),
    ),
    entry(
        "AK431", "KV cache does not fit in memory",
        meaning="The pages asked for need more memory than the device has free, so the cache was "
                "not allocated (nothing was). The size is num_pages x page_size x the bytes of "
                "one token's K/V (MLA: latent) row, summed over the layers.",
        trigger="PagedKVCache(layers, num_pages=..., ...) whose buffers exceed the free memory of "
                "the device (CUDA: torch.cuda.mem_get_info; CPU: MemAvailable), or whose "
                "allocation failed.",
        situations=["num_pages computed from a token budget meant for another model or GPU.",
                    "Another process holds most of the GPU's memory.",
                    "An fp32 cache where bf16 or fp8 was meant (2-4x the bytes)."],
        solutions=["Ask for fewer pages (the message gives the bytes needed and free).",
                   "Use a smaller KV dtype (bf16, fp8_e4m3).",
                   "Free the device's memory, or run on a device with more."],
        before="PagedKVCache(layers, num_pages=10**9, page_size=16)",
        after="PagedKVCache(layers, num_pages=4096, page_size=16)",
        related=("AK430", "AK400"),
    ),
]
