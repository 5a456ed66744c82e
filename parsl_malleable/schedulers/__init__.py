"""Scheduler adapters (Slurm, PBS Pro, emulated): commands, parsers, snapshots."""
