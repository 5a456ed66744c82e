"""Trace-driven evaluation of harvesting and allocation policies."""
