"""Measure backends on this device and write a device profile (``attnkit tune``).

Imports torch (it runs kernels); planning reads the profiles it writes without it
(planning/profile.py). ``timing`` is the one timing method, shared with benchmarks/.
"""
