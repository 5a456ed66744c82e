"""mypy finds no type error in parsl_malleable/ (settings: [tool.mypy] in pyproject.toml).

CI runs only the README's test command, so the type check is a test. It is skipped where mypy
is not installed (it comes with the ``test`` extra, pinned, so CI always has it). mypy runs in the
background from the start of the session (``tests/background_checks.py``).
"""

from __future__ import annotations

import pytest

from tests import background_checks


@pytest.mark.timeout(300)
def test_mypy_is_clean() -> None:
    check = background_checks.mypy()
    if check is None:
        pytest.skip("mypy comes with the test extra")
    status, output = check.result(timeout_s=280)
    assert status == 0, output
    assert "Success: no issues found" in output
