"""The Globus Compute endpoint files, installed as ``parsl_malleable.globus_endpoint``.

An admin who installed parsl-malleable with pip (no checkout) finds them here::

    python -c "from parsl_malleable.globus_endpoint import folder, hook_folder; print(folder())"

``folder()`` holds ``config.yaml``, ``user_config_template.yaml.j2``, ``user_config_schema.json``
and ``user_environment.yaml``; ``hook_folder()`` is the folder to put on the user endpoints'
``PYTHONPATH`` (its ``sitecustomize.py`` lets the template name ``type: BackfillProvider``).
See docs/provider.md, "Globus Compute".
"""

from __future__ import annotations

from pathlib import Path


def folder() -> Path:
    """The folder of the endpoint files."""
    return Path(__file__).resolve().parent


def hook_folder() -> Path:
    """The folder holding the start-up hook (``sitecustomize.py``) for ``PYTHONPATH``."""
    return folder() / "python"
