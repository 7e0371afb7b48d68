"""triton_dsa: DeepSeek sparse attention (DSA) in Triton: the indexer's scores + top-k
(indexer.py) and MLA attention over each token's selected positions (sparse_mla.py)."""
