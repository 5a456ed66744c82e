"""Fixtures of the campaign tests: the local Slurm cluster of the scheduler tests."""

from tests.schedulers.conftest import SlurmCluster, fake_bin, slurm_cluster  # noqa: F401
