"""triton: paged MHA/GQA/MQA attention in Triton kernels for NVIDIA GPUs (extend + split-KV decode)."""
