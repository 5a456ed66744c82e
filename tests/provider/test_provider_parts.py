"""BackfillProvider is composed of parts, each owning its state (issue #39).

It used to be one class over five mixins sharing some 25 attributes that any method could set.
Now the provider makes each part with what it needs (the book, the poll context, the parts it
calls) and keeps Parsl's interface; these tests keep it that way: no mixin in the provider's
bases, and no part assigns an attribute of another object it was given (it calls that
object's methods, or changes the records the book lends it under the book's lock).
"""

from __future__ import annotations

import ast
from pathlib import Path

from parsl.providers.base import ExecutionProvider
from parsl.utils import RepresentationMixin

from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.book_keeping import BookKeeper
from parsl_malleable.harvest.cancelling import Canceller
from parsl_malleable.harvest.launching import Launcher
from parsl_malleable.harvest.poll_context import PollContext
from parsl_malleable.harvest.walltime import WalltimeGuard
from parsl_malleable.harvest.yield_step import Yielder
from parsl_malleable.provider import BackfillProvider

HARVEST = Path(__file__).resolve().parents[2] / "parsl_malleable" / "harvest"
PART_MODULES = ["cancelling", "book_keeping", "walltime", "yield_step", "launching", "block_book"]
# Objects a part changes by design: the records and slots the book lends, and a poll's report.
DATA = {"rec", "slot", "member", "report"}


def test_the_provider_has_no_mixin() -> None:
    assert BackfillProvider.__bases__ == (ExecutionProvider, RepresentationMixin)


def test_each_part_is_made_with_what_it_needs(tmp_path: Path) -> None:
    provider = BackfillProvider("emulated", script_dir=str(tmp_path), autostart=False)
    parts = {
        "book": BlockBook,
        "ctx": PollContext,
        "canceller": Canceller,
        "keeper": BookKeeper,
        "walltime": WalltimeGuard,
        "yielder": Yielder,
        "launcher": Launcher,
    }
    for name, kind in parts.items():
        assert isinstance(getattr(provider, name), kind), name
    # One book, one context, shared by every part (not copies).
    for part in (provider.canceller, provider.keeper, provider.walltime, provider.launcher):
        assert part._book is provider.book and part._ctx is provider.ctx
    assert provider.resources is provider.book.resources  # what Parsl reads


def _foreign_writes(path: Path) -> list[str]:
    """``x.y.z = ...`` or ``x.y = ...`` where ``x.y`` is not ``self`` itself: an attribute of
    another object set by this module (records of the book excepted)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            owner = target.value
            if isinstance(owner, ast.Name) and owner.id in {"self", *DATA}:
                continue
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(target)}")
    return found


def test_no_part_sets_an_attribute_of_another(tmp_path: Path) -> None:
    writes = [w for module in PART_MODULES for w in _foreign_writes(HARVEST / f"{module}.py")]
    assert writes == []
    # and the check sees a write of that kind where one is
    planted = tmp_path / "planted_write.py"
    planted.write_text("def f(self):\n    self._book.tag = 'x'\n")
    assert _foreign_writes(planted) == ["planted_write.py:2: self._book.tag"]
