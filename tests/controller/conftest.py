"""The Slurm fixtures of the provider tests (cluster, native jobs, providers), shared here."""

from tests.provider.conftest import natives, providers  # noqa: F401
from tests.schedulers.conftest import fake_bin, slurm_cluster  # noqa: F401
