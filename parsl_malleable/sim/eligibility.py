"""Which nodes each job may use, as arrays for the masked kernel (:mod:`~.masked_engine`).

A job that may run only on some nodes (a PBS queue's vnodes, a Slurm partition) has a *class*:
its set of allowed node ids; jobs with the same set share one class, and ``-1`` means "any
node". The nodes fall into *atoms*: groups of nodes that belong to exactly the same classes.
Two nodes of one atom are interchangeable for every job, so the kernel counts free nodes per
atom instead of testing every node, and conservative backfill books its reservations as counts
per atom. Atoms are numbered by their lowest node id, so taking atoms in order takes low ids
first, the simulator's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

ANY = -1  # the class of a job that may use any node


def node_bitmask(ids: np.ndarray, n_nodes: int) -> np.ndarray:
    """A bitset (uint64 words, as :mod:`~.nodes`) with the nodes ``ids`` set."""
    ids = np.asarray(ids, dtype=np.int64)
    words = np.zeros((n_nodes + 63) // 64, dtype=np.uint64)
    np.bitwise_or.at(words, ids >> 6, np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64)))
    return words


@dataclass(frozen=True)
class Eligibility:
    """Per-job node eligibility for :func:`~.masked_engine.run_schedule_masked`.

    ``job_class``: each job's class (``ANY`` = -1: every node); ``class_mask[c]``: the nodes of
    class ``c`` as a bitset; ``class_atoms[class_ptr[c]:class_ptr[c + 1]]``: its atoms,
    ascending; ``node_atom``: each node's atom; ``atom_mask[a]``: the nodes of atom ``a``.
    """

    job_class: np.ndarray
    class_mask: np.ndarray
    class_ptr: np.ndarray
    class_atoms: np.ndarray
    node_atom: np.ndarray
    atom_mask: np.ndarray

    @property
    def n_atoms(self) -> int:
        """How many atoms the nodes fall into."""
        return int(self.atom_mask.shape[0])

    @property
    def restricted(self) -> bool:
        """Whether any job may use only some nodes."""
        return bool((self.job_class != ANY).any())

    def with_classes(self, job_class: np.ndarray) -> Eligibility:
        """The same classes and atoms for another list of jobs (``job_class`` per job)."""
        return replace(self, job_class=np.asarray(job_class, dtype=np.int64))


def eligibility(n_nodes: int, allowed: Sequence[np.ndarray | None]) -> Eligibility:
    """Classes and atoms for jobs whose allowed node ids are ``allowed`` (None: any node).

    A set that holds every node restricts nothing and gets class ``ANY``.
    """
    classes: dict[bytes, int] = {}
    members: list[np.ndarray] = []
    job_class = np.full(len(allowed), ANY, dtype=np.int64)
    seen: dict[int, int] = {}  # jobs of one queue usually share one array: sort it once
    for j, given in enumerate(allowed):
        if given is None:
            continue
        if id(given) in seen:
            job_class[j] = seen[id(given)]
            continue
        ids = np.unique(np.asarray(given, dtype=np.int64))
        if len(ids) == n_nodes:
            c = ANY
        else:
            c = classes.setdefault(ids.tobytes(), len(members))
            if c == len(members):
                members.append(ids)
        seen[id(given)] = job_class[j] = c
    member = np.zeros((n_nodes, len(members)), dtype=bool)
    for c, ids in enumerate(members):
        member[ids, c] = True
    if members and n_nodes:
        # atoms: nodes with the same membership row, numbered by their lowest node id
        _, first, inverse = np.unique(member, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        node_atom = rank[np.asarray(inverse).reshape(-1)].astype(np.int64)
        n_atoms = len(order)
    else:
        node_atom = np.zeros(n_nodes, dtype=np.int64)
        n_atoms = 1 if n_nodes else 0
    atom_member = np.zeros((n_atoms, len(members)), dtype=bool)
    atom_member[node_atom, :] = member
    class_ptr = np.zeros(len(members) + 1, dtype=np.int64)
    class_atoms: list[np.ndarray] = []
    for c in range(len(members)):
        atoms = np.flatnonzero(atom_member[:, c]).astype(np.int64)
        class_atoms.append(atoms)
        class_ptr[c + 1] = class_ptr[c] + len(atoms)
    words = (n_nodes + 63) // 64
    class_mask = np.zeros((len(members), words), dtype=np.uint64)
    for c, ids in enumerate(members):
        class_mask[c] = node_bitmask(ids, n_nodes)
    atom_mask = np.zeros((n_atoms, words), dtype=np.uint64)
    ids = np.arange(n_nodes, dtype=np.int64)
    bit = np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64))
    np.bitwise_or.at(atom_mask, (node_atom, ids >> 6), bit)
    return Eligibility(
        job_class=job_class,
        class_mask=class_mask,
        class_ptr=class_ptr,
        class_atoms=(np.concatenate(class_atoms) if class_atoms else np.zeros(0, dtype=np.int64)),
        node_atom=node_atom,
        atom_mask=atom_mask,
    )
