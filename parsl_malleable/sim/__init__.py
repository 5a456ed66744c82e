"""Batch-scheduler simulator: FCFS, EASY and conservative backfill, with per-node idle timeline."""
