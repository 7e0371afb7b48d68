"""Catalog entries for this code range (see errors/catalog/__init__.py)."""
from attnkit.errors.catalog import entry

ENTRIES = []
