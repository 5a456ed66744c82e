"""``@malleable_app`` argument checking and how rank functions travel to workers."""

from __future__ import annotations

import parsl
import pytest
from parsl.config import Config
from parsl.executors import ThreadPoolExecutor

from apps.digits import train_elastic
from parsl_malleable.app import ElasticOptions, malleable_app
from parsl_malleable.controller.functions import function_reference as _reference
from parsl_malleable.controller.functions import resolve_function as _resolve
from parsl_malleable.errors import ConfigError


def test_options_are_checked_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown option.*chek_every"):
        malleable_app(checkpoint_dir=str(tmp_path), chek_every=2)
    with pytest.raises(ConfigError, match="backend must be one of torch, horovod; got 'mpi'"):
        malleable_app(checkpoint_dir=str(tmp_path), backend="mpi")(train_elastic)
    with pytest.raises(ConfigError, match="min_nodes=4, max_nodes=2"):
        malleable_app(checkpoint_dir=str(tmp_path), min_nodes=4, max_nodes=2)(train_elastic)
    with pytest.raises(
        ConfigError, match=r"ElasticOptions: check_every=0: .*greater than or equal to 1"
    ):
        ElasticOptions(checkpoint_dir=str(tmp_path), check_every=0)
    with pytest.raises(ConfigError, match=r"checkpoint_every=2\.5: .*fractional part"):
        malleable_app(checkpoint_dir=str(tmp_path), checkpoint_every=2.5)


def test_submit_without_a_htex_names_the_executors_found(tmp_path):
    app = malleable_app(checkpoint_dir=str(tmp_path))(train_elastic)
    parsl.load(Config(executors=[ThreadPoolExecutor(label="threads")], run_dir=str(tmp_path)))
    try:
        with pytest.raises(ConfigError, match=r"exactly one HighThroughputExecutor.*'threads'"):
            app(epochs=1)
    finally:
        parsl.dfk().cleanup()


decorated = malleable_app(checkpoint_dir="/tmp/unused")(train_elastic)


def test_functions_travel_by_name_and_decorated_ones_are_unwrapped():
    assert _reference(train_elastic) == ("apps.digits", "train_elastic")
    assert _resolve(_reference(train_elastic)) is train_elastic
    # A module-level decorated name resolves to the wrapper on the worker, which is unwrapped.
    assert _resolve((__name__, "decorated")) is train_elastic

    def local(ctx):
        return ctx

    assert _reference(local) is local  # not importable by name: sent by value


@pytest.mark.slow
def test_an_error_in_the_training_function_fails_the_app_future(tmp_path):
    from parsl_malleable.app import ElasticJobError
    from tests.elastic import elastic_scenario as sc

    sc.environment_ready()
    parsl.load(sc.htex_config(tmp_path / "runinfo", init_blocks=1))
    try:
        app = malleable_app(checkpoint_dir=str(tmp_path / "ckpt"))(train_elastic)
        future = app(epochs=1, batch_size=0)  # the sampler refuses it on the rank
        with pytest.raises(ElasticJobError, match="batch_size >= 1"):
            future.result(timeout=120)
    finally:
        parsl.dfk().cleanup()
