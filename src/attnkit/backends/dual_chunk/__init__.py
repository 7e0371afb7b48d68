"""dual_chunk backend: dual chunk attention (see backend.py for the interface).

Torch-free on import: the registry imports ``declaration`` through this package.
"""
