"""The ``attnkit`` command line (torch-free); entry point ``attnkit.cli.main:main``."""
