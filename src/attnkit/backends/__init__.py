"""Attention backends behind one interface (see base.py). Each backend is a subpackage with a
torch-free ``declaration.py`` and its implementation, loaded lazily through the registry."""
