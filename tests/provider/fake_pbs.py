"""A stand-in PBS server: qsub, qstat, qsig, qdel, qselect, pbsnodes and pbs_rstat over a state
folder, and a MoM that runs each job on this machine the way OpenPBS's pbs_mom does.

Run as ``python fake_pbs.py COMMAND ARGS...`` (:class:`FakePBS` writes one wrapper per command
into a ``bin`` folder); the state folder is ``$FAKE_PBS_DIR``. Standard library only.

What the MoM copies from pbs_mom (OpenPBS 23, src/resmom), because the provider depends on it:

- the job's top task is a login shell in a session of its own that reads the script's path
  from its standard input and runs it (start_exec.c, SHELL_INVOKE): the script is a child of
  the shell, not the shell itself;
- the server shows the job in R (substate 41) before stime is set; then substate 42 with stime;
- ``qsig -s SIG`` sends SIG to every process of that session (kill_session, mom_mach.c);
- ``qdel`` sends SIGTERM to every process of the session and SIGKILL after ``kill_delay``
  (terminate_job, requests.c);
- when the top shell has exited the job is over: what is left of its session is killed with
  SIGKILL (scan_for_exiting, catch_child.c); Exit_status is the shell's status, or 256 + N
  when signal N killed it (mom_start.c); the job is in E for a moment, then F with substate 91
  after a qdel, 92 after exit status 0, 93 otherwise (svr_setjob_histinfo, svr_jobfunc.c).

Placement is PBS's own: a job takes the first free vnodes that its queue may use (a vnode bound
to a queue runs only that queue's jobs; a queue with bound vnodes runs only there). A job that
does not fit stays queued; there is no later scheduling pass.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SERVER = "fakepbs"
VERSION = "23.06.06"
KILL_DELAY_S = 10.0  # PBS's default kill_delay
PRERUN_S = 0.3  # how long a job shows R without stime (the server's run request to the MoM)
EXITING_S = 0.3  # how long a job shows E after its shell exited
CHECK_S = 0.05
# Unknown Job Id, Job has finished, Request invalid for state of job (PBSE_* codes).
E_UNKNOWN, E_FINISHED, E_BADSTATE = 153, 35, 168

Jobs = dict[str, dict[str, Any]]


# ---------------------------------------------------------------------------- the state


class State:
    """The state folder: ``nodes.json``, ``queues.json``, ``server.json``, ``natives.json``
    (jobs the test puts in the queue as others would), ``jobs/<seq>.json`` (ours: PBS
    attributes plus private keys starting with ``_``), ``calls.log`` and a lock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "jobs").mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with open(self.root / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self, name: str, default: Any) -> Any:
        try:
            return json.loads((self.root / name).read_text())
        except FileNotFoundError:
            return default

    def write(self, name: str, value: Any) -> None:
        path = self.root / name
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value, indent=1))
        os.replace(tmp, path)

    def jobs(self) -> Jobs:
        out = {}
        for path in sorted(
            (self.root / "jobs").glob("*.json"), key=lambda p: int(p.stem.split(".")[0])
        ):
            job = json.loads(path.read_text())
            out[job["_id"]] = job
        return out

    def job_file(self, job_id: str) -> str:
        return f"jobs/{job_id.split('.', 1)[0]}.json"

    def update(self, job_id: str, **attrs: Any) -> dict[str, Any]:
        with self.locked():
            job = self.read(self.job_file(job_id), {})
            job.update(attrs)
            for key in [k for k, v in attrs.items() if v is None]:
                job.pop(key, None)
            self.write(self.job_file(job_id), job)
            return job

    def log(self, argv: list[str]) -> None:
        with open(self.root / "calls.log", "a") as f:
            f.write(" ".join(argv) + "\n")


def ctime(t: float) -> str:
    """A time as qstat prints it (local time)."""
    return time.ctime(t)


def find(jobs: Jobs, job_id: str) -> dict[str, Any] | None:
    number = job_id.split(".", 1)[0]
    return jobs.get(job_id) or next(
        (j for k, j in jobs.items() if k.split(".", 1)[0] == number), None
    )


def public(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if not k.startswith("_")}


def all_jobs(state: State) -> Jobs:
    return {**state.read("natives.json", {}), **state.jobs()}


def held_vnodes(jobs: Jobs) -> dict[str, str]:
    """vnode -> the job holding it (jobs in R or E with an exec_vnode)."""
    held = {}
    for job_id, job in jobs.items():
        if job.get("job_state") in ("R", "E") and isinstance(job.get("exec_vnode"), str):
            for chunk in job["exec_vnode"].split("+"):
                held[chunk.strip("()").split(":", 1)[0]] = job_id
    return held


# ---------------------------------------------------------------------------- processes


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid``, read from /proc as the MoM does."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def kill_session(sid: int, signum: int) -> int:
    """Send ``signum`` to every process of session ``sid``; how many there were."""
    pids = session_pids(sid)
    # The session leader first (kill_ptree from the top), then the rest.
    for pid in sorted(pids, key=lambda p: p != sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return len(pids)


def signal_number(name: str) -> int:
    if name.isdigit():
        return int(name)
    name = name.upper().removeprefix("SIG")
    return int(signal.Signals[f"SIG{name}"])


# ---------------------------------------------------------------------------- commands


def qsub(state: State, args: list[str]) -> int:
    opts: dict[str, Any] = {"-l": []}
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--":
            rest = list(it)
            break
        if arg in ("-N", "-q", "-o", "-j", "-A", "-r"):
            opts[arg] = next(it)
        elif arg == "-l":
            opts["-l"].append(next(it))
        else:
            rest = [arg, *it]
            break
    resources = dict(item.split("=", 1) for item in opts["-l"])
    queues = state.read("queues.json", {})
    server = state.read("server.json", {})
    queue = opts.get("-q") or server.get("default_queue", "workq")
    if queues and queue not in queues:
        print(f"qsub: Unknown queue {queue}", file=sys.stderr)
        return 1
    count = int(str(resources.get("select", "1")).split(":", 1)[0])
    with state.locked():
        seq = state.read("seq", 100) + 1
        state.write("seq", seq)
        job_id = f"{seq}.{SERVER}"
        now = time.time()
        walltime = resources.get("walltime", "01:00:00")
        job = {
            "_id": job_id,
            "_script": rest,
            "_output": opts.get("-o") or str(Path.cwd() / f"STDIN.o{seq}"),
            "Job_Name": opts.get("-N", "STDIN"),
            "Job_Owner": f"{os.environ.get('USER', 'user')}@{SERVER}",
            "job_state": "Q",
            "queue": queue,
            "server": SERVER,
            "ctime": ctime(now),
            "qtime": ctime(now),
            "mtime": ctime(now),
            "Rerunable": "False" if opts.get("-r") == "n" else "True",
            "Resource_List": {
                "nodect": count,
                # PBS's JSON prints every value that reads as a number as one.
                "select": count if resources.get("select", "1").isdigit() else resources["select"],
                "place": resources.get("place", "free"),
                "walltime": walltime,
            },
            "substate": 10,
            "comment": "Not Running: Insufficient amount of resource: nodect",
        }
        vnodes = free_vnodes(state, queue, queues)
        if len(vnodes) >= count:
            chosen = vnodes[:count]
            job.update(
                job_state="R",
                substate=41,  # sent to the MoM: no stime yet
                exec_vnode="+".join(f"({v}:ncpus=1)" for v in chosen),
                exec_host="+".join(f"{v}/0" for v in chosen),
                comment=f"Job run at {ctime(now)} on ({')+('.join(chosen)})",
            )
        state.write(state.job_file(job_id), job)
    if job["job_state"] == "R":
        with open(os.devnull, "rb") as null_in, open(state.root / "mom.log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-I", __file__, "mom", job_id],
                stdin=null_in,
                stdout=log,
                stderr=log,
                start_new_session=True,  # the MoM outlives qsub and the caller's signals
                env=os.environ.copy(),
            )
    print(job_id)
    return 0


def free_vnodes(state: State, queue: str, queues: dict[str, Any]) -> list[str]:
    nodes = state.read("nodes.json", {})
    held = held_vnodes(all_jobs(state))
    bound = {a["queue"] for a in nodes.values() if a.get("queue")}
    bound |= {q for q, a in queues.items() if str(a.get("hasnodes", "")).lower() == "true"}
    out = []
    for name, attrs in nodes.items():
        if attrs.get("state", "free") != "free" or name in held:
            continue
        if attrs.get("queue", queue if queue not in bound else None) != queue:
            continue
        out.append(name)
    return out


def qstat(state: State, args: list[str]) -> int:
    flags = {a for a in args if a.startswith("-")}
    ids = [a for a in args if not a.startswith("-") and a != "json"]
    head = {"timestamp": int(time.time()), "pbs_version": VERSION, "pbs_server": SERVER}
    if "-Q" in flags:
        print(json.dumps({**head, "Queue": state.read("queues.json", {})}))
        return 0
    if "-B" in flags:
        print(json.dumps({**head, "Server": {SERVER: state.read("server.json", {})}}))
        return 0
    jobs = all_jobs(state)
    if ids:
        shown, rc = {}, 0
        for job_id in ids:
            job = find(jobs, job_id)
            if job is None:
                print(f"qstat: Unknown Job Id {job_id}", file=sys.stderr)
                rc = E_UNKNOWN
            elif job["job_state"] in ("F", "X") and "-x" not in flags:
                print(f"qstat: {job_id} Job has finished, use -x or -H", file=sys.stderr)
                rc = E_FINISHED
            else:
                shown[job.get("_id", job_id)] = job
        if shown:
            print(json.dumps({**head, "Jobs": {k: public(v) for k, v in shown.items()}}))
        return rc
    if "-x" not in flags:
        jobs = {k: v for k, v in jobs.items() if v.get("job_state") not in ("F", "X")}
    print(json.dumps({**head, "Jobs": {k: public(v) for k, v in jobs.items()}}))
    return 0


def pbsnodes(state: State, args: list[str]) -> int:
    jobs = all_jobs(state)
    held = held_vnodes(jobs)
    out = {}
    for name, attrs in state.read("nodes.json", {}).items():
        node = {"Mom": name, "ntype": "PBS", "pcpus": 1, **attrs}
        node.setdefault("state", "free")
        node.setdefault("resources_available", {"host": name, "vnode": name, "ncpus": 1})
        if name in held:
            node["jobs"] = [f"{held[name]}/0"]
            if node["state"] == "free":
                node["state"] = "job-exclusive"
        out[name] = node
    print(json.dumps({"timestamp": int(time.time()), "pbs_server": SERVER, "nodes": out}))
    return 0


def qselect(state: State, args: list[str]) -> int:
    name = args[args.index("-N") + 1] if "-N" in args else None
    for job_id, job in state.jobs().items():
        if job["job_state"] not in ("F", "X") and (name is None or job["Job_Name"] == name):
            print(job_id)
    return 0


def qsig(state: State, args: list[str]) -> int:
    signame = args[args.index("-s") + 1] if "-s" in args else "TERM"
    ids = [a for i, a in enumerate(args) if not a.startswith("-") and args[i - 1] != "-s"]
    signum = signal_number(signame)
    rc = 0
    jobs = state.jobs()
    for job_id in ids:
        job = find(jobs, job_id)
        if job is None:
            print(f"qsig: Unknown Job Id {job_id}", file=sys.stderr)
            rc = E_UNKNOWN
        elif job["job_state"] in ("F", "X"):
            print(f"qsig: Job has finished {job_id}", file=sys.stderr)
            rc = E_FINISHED
        elif job["job_state"] != "R" or job.get("substate") != 42 or "_sid" not in job:
            print(f"qsig: Request invalid for state of job {job_id}", file=sys.stderr)
            rc = E_BADSTATE
        else:
            kill_session(job["_sid"], signum)
    return rc


def qdel(state: State, args: list[str]) -> int:
    rc = 0
    now = time.time()
    for job_id in [a for a in args if not a.startswith("-")]:
        job = find(state.jobs(), job_id)
        if job is None:
            print(f"qdel: Unknown Job Id {job_id}", file=sys.stderr)
            rc = E_UNKNOWN
        elif job["job_state"] in ("F", "X"):
            print(f"qdel: Job has finished {job_id}", file=sys.stderr)
            rc = E_FINISHED
        elif job["job_state"] in ("Q", "H", "W"):
            state.update(job["_id"], job_state="F", substate=91, mtime=ctime(now))
        else:
            state.update(job["_id"], _deleted_at=now)
            if "_sid" in job:
                kill_session(job["_sid"], signal.SIGTERM)  # the MoM's terminate_job
    return rc


def pbs_rstat(state: State, args: list[str]) -> int:
    return 0  # no reservations


# ---------------------------------------------------------------------------- the MoM


def mom(state: State, job_id: str) -> int:
    """Run job ``job_id`` as pbs_mom would, until it is over."""
    time.sleep(PRERUN_S)  # the server's run request on its way: R without stime
    job = state.jobs()[job_id]
    if job.get("_deleted_at"):
        state.update(job_id, job_state="F", substate=91, mtime=ctime(time.time()))
        return 0
    vnodes = [c.strip("()").split(":", 1)[0] for c in job["exec_vnode"].split("+")]
    workdir = Path(job["_output"]).parent
    nodefile = state.root / f"aux-{job_id}"
    nodefile.write_text("".join(f"{v}\n" for v in vnodes))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    env.update(
        PBS_JOBID=job_id,
        PBS_JOBNAME=job["Job_Name"],
        PBS_QUEUE=job["queue"],
        PBS_NODEFILE=str(nodefile),
        PBS_O_WORKDIR=str(workdir),
        PBS_ENVIRONMENT="PBS_BATCH",
    )
    script = job["_script"]
    with open(job["_output"], "ab") as out:
        # The login shell reads the script's path on its standard input and runs it.
        shell = subprocess.Popen(
            ["bash"],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        assert shell.stdin is not None
        shell.stdin.write((" ".join(script) + "\n").encode())
        shell.stdin.close()
    started = time.time()
    state.update(job_id, substate=42, stime=ctime(started), session_id=shell.pid, _sid=shell.pid)
    limit = _seconds(job["Resource_List"]["walltime"])
    over_limit_at = None
    while shell.poll() is None:
        now = time.time()
        deleted_at = state.jobs()[job_id].get("_deleted_at")
        if over_limit_at is None and now - started > limit:
            over_limit_at = now  # the MoM's walltime check: TERM, KILL after kill_delay
            kill_session(shell.pid, signal.SIGTERM)
        for since in (deleted_at, over_limit_at):
            if since is not None and now - since > KILL_DELAY_S:
                kill_session(shell.pid, signal.SIGKILL)
        time.sleep(CHECK_S)
    code = shell.returncode
    status = code if code >= 0 else 256 - code
    if over_limit_at is not None:
        status = -29  # JOB_EXEC_KILL_WALLTIME
    # The top shell is gone: the job is over, and what is left of its session dies.
    kill_session(shell.pid, signal.SIGKILL)
    state.update(job_id, job_state="E", substate=50)
    time.sleep(EXITING_S)
    deleted = state.jobs()[job_id].get("_deleted_at") is not None
    now = time.time()
    state.update(
        job_id,
        job_state="F",
        substate=91 if deleted else 92 if status == 0 else 93,
        Exit_status=status,
        obittime=ctime(now),
        mtime=ctime(now),
        session_id=None,
    )
    return 0


def _seconds(walltime: str) -> float:
    seconds = 0.0
    for part in str(walltime).split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


COMMANDS = {
    "qsub": qsub,
    "qstat": qstat,
    "qsig": qsig,
    "qdel": qdel,
    "qselect": qselect,
    "pbsnodes": pbsnodes,
    "pbs_rstat": pbs_rstat,
}


def main(argv: list[str]) -> int:
    state = State(Path(os.environ["FAKE_PBS_DIR"]))
    command, args = argv[0], argv[1:]
    if command == "mom":
        return mom(state, args[0])
    state.log([command, *args])
    return COMMANDS[command](state, args)


# ---------------------------------------------------------------------------- for tests


class FakePBS:
    """A fake PBS server in ``root``: ``env`` puts its commands first on PATH."""

    def __init__(
        self,
        root: Path,
        nodes: dict[str, dict[str, Any]],
        *,
        queues: dict[str, dict[str, Any]] | None = None,
        server: dict[str, Any] | None = None,
    ) -> None:
        self.state = State(root)
        self.state.write("nodes.json", nodes)
        self.state.write(
            "queues.json",
            queues
            if queues is not None
            else {"workq": {"queue_type": "Execution", "enabled": "True", "started": "True"}},
        )
        self.state.write("server.json", server or {"default_queue": "workq"})
        bin_dir = root / "bin"
        bin_dir.mkdir(exist_ok=True)
        for name in COMMANDS:
            path = bin_dir / name
            path.write_text(
                f'#!/bin/sh\nexec {sys.executable} -I {Path(__file__).resolve()} {name} "$@"\n'
            )
            path.chmod(0o755)
        self.env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_PBS_DIR": str(root),
        }

    def set_node(self, name: str, **attrs: Any) -> None:
        """Change vnode ``name`` (e.g. ``state="offline"``) as an administrator would."""
        with self.state.locked():
            nodes = self.state.read("nodes.json", {})
            nodes[name].update(attrs)
            self.state.write("nodes.json", nodes)

    def jobs(self) -> Jobs:
        """Our jobs' attributes by id (private keys included)."""
        return self.state.jobs()

    def job(self, job_id: str) -> dict[str, Any]:
        found = find(self.state.jobs(), job_id)
        assert found is not None, job_id
        return found

    def calls(self) -> list[str]:
        """Every command run, in order (the MoM's work not included)."""
        try:
            return (self.state.root / "calls.log").read_text().splitlines()
        except FileNotFoundError:
            return []

    def session_alive(self, job_id: str) -> list[int]:
        """The live processes of a running job's session."""
        sid = self.job(job_id).get("_sid")
        return session_pids(sid) if sid else []

    def kill_everything(self) -> None:
        """Kill what is left of every job (the end of a test)."""
        for job in self.state.jobs().values():
            if job.get("_sid"):
                kill_session(job["_sid"], signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
