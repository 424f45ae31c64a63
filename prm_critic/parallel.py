"""Where independent tasks run: in this process (``local``, the default) or on Ray workers (``ray``).

Collection and labelling split their work into independent tasks (an episode, a state to label),
each seeded from its own identifiers (seed, episode, step, continuation), so a task's result does
not depend on the worker that runs it nor on the order tasks finish in. Workers only compute: they
return results to the driver, and the driver alone writes files (atomically, one file per shard).
A killed driver or a lost worker therefore never leaves a half-written file, and a re-run skips
the shards already written.

Usage::

    with make_executor("ray", workers=2).start(setup) as pool:   # setup() -> per-worker context
        for key, result in pool.map(fn, tasks):                   # fn(context, task) -> result
            ...

``setup`` and ``fn`` must be picklable (module-level functions, ``functools.partial`` of them);
``tasks`` is an iterable of :class:`Task`. :class:`LocalExecutor` builds one context in this process
and runs the tasks in order, letting their exceptions through unchanged. :class:`RayExecutor` starts
one Ray actor per worker (each builds its own context once), keeps every worker busy and yields
results as they finish; a task that raises fails the run with a :class:`TaskError` naming the task.
Ray is imported only by :class:`RayExecutor` (the ``ray`` extra); workers import
prm-critic themselves, so it must be installed on every node of a cluster.

Whether Ray pays (:class:`RayCostModel`): a job of ``units`` (env steps) costing ``unit_s`` seconds
each takes ``units * unit_s`` locally and ``startup_s + units * unit_s / workers + tasks *
task_overhead_s`` on Ray, so Ray is slower below a crossover (a few tens of seconds of local work
on two workers, where Ray's start-up and shutdown take ~12 s under load). :func:`choose_executor` turns
``executor="auto"`` into the faster of the two by that model and says which and why; with
``"ray"`` it prints the expected speed-up before the run starts.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from prm_critic._optional import install_hint, require

__all__ = ["EXECUTORS", "Task", "TaskError", "Executor", "LocalExecutor", "RayExecutor", "make_executor",
           "RayCostModel", "JobEstimate", "expected_speedup", "ray_installed", "check_executor", "choose_executor",
           "AUTO_MIN_SPEEDUP", "DEFAULT_RAY_STARTUP_S", "DEFAULT_RAY_TASK_OVERHEAD_S"]

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Task:
    """One unit of work: ``key`` identifies its result, ``desc`` names it in errors
    (``"episode 3, step 17 of shard_00000.npz"``), ``payload`` is what ``fn`` receives."""

    key: Any
    desc: str
    payload: Any


class TaskError(RuntimeError):
    """A task failed on a worker (or its worker process died); the message names the task. ``task`` is
    its description, ``__cause__`` the worker's exception when it could be sent back."""

    def __init__(self, message: str, task: str):
        super().__init__(message)
        self.task = task


class Executor:
    """Runs :class:`Task` s with a per-worker context. Subclasses: :class:`LocalExecutor`, :class:`RayExecutor`."""

    name = ""
    #: True when tasks run in other processes (files the driver can read may not exist there)
    remote = False
    workers = 1

    def start(self, setup: Callable[[], Any]) -> "Pool":
        """Build every worker's context with ``setup()`` (its errors are raised here, before any task)."""
        raise NotImplementedError


class Pool:
    """Started workers (a context manager: leaving it stops them)."""

    def map(self, fn: Callable[[Any, Any], Any], tasks: Iterable[Task]) -> Iterator[tuple[Any, Any]]:
        """``(task.key, fn(context, task.payload))`` for every task, in the order they finish."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _close_context(ctx: Any) -> None:
    close = getattr(ctx, "close", None)
    if callable(close):
        close()


class LocalExecutor(Executor):
    """Runs tasks one after the other in this process (no Ray needed); task errors pass through unchanged."""

    name = "local"

    def start(self, setup: Callable[[], Any]) -> Pool:
        return _LocalPool(setup())


class _LocalPool(Pool):
    def __init__(self, ctx: Any):
        self.ctx = ctx

    def map(self, fn, tasks):
        for task in tasks:
            yield task.key, fn(self.ctx, task.payload)

    def close(self) -> None:
        ctx, self.ctx = self.ctx, None
        if ctx is not None:
            _close_context(ctx)


class _WorkerBody:
    """The Ray actor: one context per worker process, built once, then ``fn(ctx, payload)`` per task."""

    def __init__(self, setup: Callable[[], Any]):
        self.ctx = setup()

    def ready(self) -> int:
        return os.getpid()

    def run_group(self, fn: Callable[[Any, Any], Any], payloads: list) -> tuple[list, float]:
        """``[fn(ctx, p) for p in payloads]`` and the seconds they took. A task that raises re-raises
        its exception with ``prm_task_index`` set to its index in ``payloads`` (it survives pickling),
        so the driver can name it."""
        out = []
        t0 = time.perf_counter()
        for j, p in enumerate(payloads):
            try:
                out.append(fn(self.ctx, p))
            except Exception as exc:
                exc.prm_task_index = j  # type: ignore[attr-defined]
                raise
        return out, time.perf_counter() - t0

    def close(self) -> None:
        _close_context(self.ctx)


DEFAULT_CONNECT_S = 60.0


def joined_cluster_message(address: str, gcs_address: str | None, nodes: list[dict], resources: dict) -> str:
    """The line printed after joining an existing Ray cluster: which one, how many nodes and CPUs."""
    alive = sum(1 for n in nodes if n.get("Alive", n.get("alive", True)))
    cpus = int(resources.get("CPU", 0))
    where = gcs_address or "?"
    return (f"ray: joined the existing Ray cluster at {where} (address={address!r}): {alive} node(s), {cpus} CPUs; "
            "its other jobs share these CPUs")


def _probe_cluster(address: str, connect_s: float) -> None:
    """Reach the Ray cluster at ``address`` within ``connect_s`` seconds, or raise a clear error.

    ``ray.init(address=...)`` retries an unreachable head for many minutes; this checks first that
    something answers there: a TCP connection, then the cluster's GCS (in a daemon thread, abandoned
    after ``connect_s``).
    """
    import socket
    import threading

    hint = ("expected a running Ray head node there (`ray start --head` prints its address), or pass "
            "connect_s / $PRM_RAY_CONNECT_S for a slower network")
    target = address.split("://", 1)[1] if "://" in address else address
    if not address.startswith("ray://"):
        from ray._private.services import canonicalize_bootstrap_address

        try:
            resolved = canonicalize_bootstrap_address(address)  # "auto": the last `ray start` here, if any
        except ConnectionError as exc:
            raise ConnectionError(f"address: no Ray cluster found for {address!r} ({exc}); {hint}") from exc
        if resolved is None:
            return  # "auto" and no recorded cluster: ray.init says so at once
        target = resolved
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address: expected 'auto', 'host:port' or 'ray://host:port', got {address!r}")
    deadline = time.monotonic() + connect_s
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=connect_s).close()
    except OSError as exc:
        raise ConnectionError(f"address: nothing answers at {address!r} ({host}:{port}: {exc}); {hint}") from exc
    if address.startswith("ray://"):
        return
    done: dict[str, Any] = {}

    def check() -> None:
        try:
            # ray's _raylet.pyi stub lists only part of the compiled module (GcsClient is there at runtime)
            from ray._raylet import GcsClient  # type: ignore[attr-defined]

            done["cluster"] = GcsClient(address=target).cluster_id
            done["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported below
            done["error"] = exc

    t = threading.Thread(target=check, daemon=True, name="prm-ray-probe")
    t.start()
    t.join(max(deadline - time.monotonic(), 0.1))
    if not done.get("ok"):
        why = f"{type(done['error']).__name__}: {done['error']}" if "error" in done \
            else f"no answer within connect_s={connect_s:g} s"
        raise ConnectionError(f"address: no Ray cluster at {address!r} ({why}); {hint}")


class RayExecutor(Executor):
    """Runs tasks on ``workers`` Ray actors (one CPU each).

    Args:
        workers: number of worker processes; ``None``: one per CPU of the Ray cluster.
        address: an existing cluster (``"auto"``, ``"ray://head:10001"``, ``"10.0.0.1:6379"``); ``None``:
            use the Ray instance this process already started, or start a local one with ``workers`` CPUs.
        runtime_env: Ray runtime environment for a Ray instance started here (e.g. ``{"env_vars": {...}}``).
        max_restarts: times a lost worker process is restarted; the tasks it was running are retried
            there (a task's result does not depend on the worker, so a retry returns the same result).
        in_flight: worker calls queued per worker (2: the next call is there when one finishes).
        call_s: target seconds of work per worker call. Short tasks (a PointMaze state: a few ms)
            are sent in groups, so that Ray's per-call cost (about a millisecond of driver and worker
            time) stays small beside the work: the first call of each worker carries one task, later
            ones ``ceil(call_s / mean task seconds)`` tasks (at most ``max_group``). Grouping changes
            neither results (every task is seeded by its own ids) nor their order within a shard;
            ``call_s=0`` sends one task per call.
        max_group: the most tasks in one worker call.
        connect_s: the most seconds spent reaching the cluster at ``address`` before a clear error
            (``None``: ``$PRM_RAY_CONNECT_S``, else 60). Ray itself would retry for many minutes.
    """

    name = "ray"
    remote = True

    def __init__(self, workers: int | None = None, *, address: str | None = None,
                 runtime_env: dict | None = None, max_restarts: int = 2, in_flight: int = 2,
                 call_s: float = 0.05, max_group: int = 64, connect_s: float | None = None):
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers: expected an integer >= 1 (or None: one per CPU of the Ray cluster), got {workers!r}")
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ValueError(f"address: expected a Ray cluster address such as 'auto' or 'head-node:6379', got {address!r}")
        for name, v, lo in (("max_restarts", max_restarts, 0), ("in_flight", in_flight, 1), ("max_group", max_group, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name}: expected an integer >= {lo}, got {v!r}")
        if isinstance(call_s, bool) or not isinstance(call_s, (int, float)) or not math.isfinite(call_s) or call_s < 0:
            raise ValueError(f"call_s: expected a finite number of seconds >= 0 (0: one task per worker call), "
                             f"got {call_s!r}")
        self.call_s = float(call_s)
        if connect_s is None:
            env = os.environ.get("PRM_RAY_CONNECT_S")
            try:
                connect_s = float(env) if env else DEFAULT_CONNECT_S
            except ValueError:
                raise ValueError(f"PRM_RAY_CONNECT_S: expected seconds > 0, got {env!r}") from None
            name = "PRM_RAY_CONNECT_S" if env else "connect_s"
        else:
            name = "connect_s"
        if isinstance(connect_s, bool) or not isinstance(connect_s, (int, float)) or not math.isfinite(connect_s) \
                or connect_s <= 0:
            raise ValueError(f"{name}: expected a finite number of seconds > 0, got {connect_s!r}")
        self.connect_s = float(connect_s)
        self.max_group = max_group
        self.address = address
        self.runtime_env = runtime_env
        self.max_restarts = max_restarts
        self.in_flight = in_flight
        self._requested = workers
        self.workers = workers or 0

    def _init(self):
        ray = require("ray", "ray")
        started = False
        if ray.is_initialized() and self.runtime_env is not None:
            raise ValueError("runtime_env: Ray is already initialised in this process, so a runtime_env given here "
                             "would not apply; pass it to ray.init() instead (or leave Ray to the executor)")
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING"}
            if self.runtime_env is not None:
                kw["runtime_env"] = self.runtime_env
            if self.address is None:
                if self._requested is not None:
                    kw["num_cpus"] = self._requested
            else:
                kw["address"] = self.address
                _probe_cluster(self.address, self.connect_s)
            try:
                ray.init(**kw)
            except ConnectionError as exc:
                raise ValueError(f"address: no Ray cluster reachable at {self.address!r} ({exc}); start one "
                                 "with `ray start --head` or pass its address") from exc
            started = True
            if self.address is not None:
                print(joined_cluster_message(self.address, ray.get_runtime_context().gcs_address, ray.nodes(),
                                             ray.cluster_resources()), file=sys.stderr, flush=True)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        n = self._requested if self._requested is not None else max(cpus, 1)
        if n > cpus:
            if started:
                ray.shutdown()
            raise ValueError(f"workers: {n} workers need {n} CPUs, but the Ray cluster has {cpus}; pass workers <= {cpus} "
                             "or add nodes (`ray start --address ...`)")
        self.workers = n
        return ray, started

    def start(self, setup: Callable[[], Any]) -> Pool:
        ray, started = self._init()
        actor_cls = ray.remote(num_cpus=1, max_restarts=self.max_restarts,
                               max_task_retries=self.max_restarts)(_WorkerBody)
        actors = [actor_cls.remote(setup) for _ in range(self.workers)]
        pool = _RayPool(ray, actors, self.in_flight, started, call_s=self.call_s, max_group=self.max_group)
        try:
            for a in actors:  # setup errors surface here, before any task runs
                pool._get(a.ready.remote(), ["worker setup"], setup_error=True)
        except BaseException:
            pool.close()
            raise
        return pool


def _failed_task(descs: list[str], cause: BaseException | None) -> str:
    """The description of the task of ``descs`` that raised ``cause`` (tagged by the worker's
    ``run_group`` with ``prm_task_index``), or of the whole call when it cannot tell."""
    j = getattr(cause, "prm_task_index", None)
    if len(descs) == 1:
        return descs[0]
    if isinstance(j, int) and 0 <= j < len(descs):
        return descs[j]
    return f"one of {len(descs)} tasks from {descs[0]}"


class _RayPool(Pool):
    def __init__(self, ray, actors, in_flight: int, owns_ray: bool, *, call_s: float = 0.0, max_group: int = 1):
        self.ray = ray
        self.actors = actors
        self.in_flight = in_flight
        self.owns_ray = owns_ray
        self.call_s = call_s
        self.max_group = max_group
        #: tasks and worker calls of the last :meth:`map` (how the tasks were grouped)
        self.calls = 0
        self.tasks = 0

    def _get(self, ref, descs: list[str], setup_error: bool = False):
        """``ray.get(ref)`` of a call for the tasks ``descs``; a failure names the task that raised."""
        exc_mod = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except exc_mod.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            name = _failed_task(descs, cause)
            if setup_error and isinstance(cause, Exception):
                raise cause from None  # the same error the local executor raises
            if isinstance(cause, Exception):
                raise TaskError(f"{name}: {type(cause).__name__}: {cause}", name) from cause
            raise TaskError(f"{name}: failed on a worker: {exc}", name) from exc
        except exc_mod.RayActorError as exc:
            name = _failed_task(descs, None)
            raise TaskError(f"{name}: its worker process died and could not be restarted ({type(exc).__name__}); "
                            "finished shards are written, re-run to continue", name) from exc

    def _group_size(self, task_s: float | None) -> int:
        if self.call_s <= 0 or task_s is None:
            return 1
        return max(1, min(self.max_group, math.ceil(self.call_s / max(task_s, 1e-6))))

    def map(self, fn, tasks):
        it = iter(tasks)
        pending: dict[Any, tuple[list[Task], int]] = {}
        busy_s, done = 0.0, 0  # worker seconds and tasks so far: the mean task time sizes the groups
        self.calls = self.tasks = 0

        def submit(i: int) -> bool:
            n = self._group_size(busy_s / done if done else None)
            group = [t for t in (next(it, None) for _ in range(n)) if t is not None]
            if not group:
                return False
            ref = self.actors[i].run_group.remote(fn, [t.payload for t in group])
            pending[ref] = (group, i)
            self.calls += 1
            self.tasks += len(group)
            return True

        for _ in range(self.in_flight):
            for i in range(len(self.actors)):
                submit(i)
        try:
            while pending:
                (ref,), _ = self.ray.wait(list(pending), num_returns=1)
                group, i = pending.pop(ref)
                results, seconds = self._get(ref, [t.desc for t in group])
                busy_s, done = busy_s + seconds, done + len(group)
                submit(i)
                for task, result in zip(group, results):
                    yield task.key, result
        finally:
            for ref in pending:
                try:
                    self.ray.cancel(ref, force=False)
                except Exception:  # already finished or its worker is gone
                    pass

    def close(self) -> None:
        actors, self.actors = self.actors, []
        for a in actors:
            try:
                self.ray.get(a.close.remote(), timeout=30)
            except Exception:  # a lost or stuck worker: it is killed below anyway
                pass
            self.ray.kill(a)
        if self.owns_ray:
            self.owns_ray = False
            self.ray.shutdown()


# --- where Ray pays: the cost model and executor="auto" ---------------------------------------------------------

#: Seconds a local Ray instance takes to start (``ray.init``, one actor per worker importing prm-critic
#: and building its env) and to shut down: the median of the whole runs measured by
#: ``python benchmarks/mc_throughput.py --crossover`` (``benchmarks/results/mc_throughput.json``,
#: docs/mc_throughput.md), on 2 cores shared with other jobs (1-min load average 6-10); an idle
#: machine starts faster. ``$PRM_RAY_STARTUP_S`` overrides it.
DEFAULT_RAY_STARTUP_S = 12.1
#: Wall seconds per Ray task beyond its work (one round trip to a worker, no-op tasks one per call),
#: from the same measurement. ``$PRM_RAY_TASK_OVERHEAD_S`` overrides it.
DEFAULT_RAY_TASK_OVERHEAD_S = 0.0007
#: ``executor="auto"`` picks Ray when its expected speed-up is at least this (a margin over 1 for the
#: model's error: a wrong pick of Ray loses its start-up, one of local a fraction of a short job).
AUTO_MIN_SPEEDUP = 1.2


def _env_seconds(name: str, default: float, minimum: float) -> float:
    env = os.environ.get(name)
    if not env:
        return default
    try:
        v = float(env)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < minimum:
        raise ValueError(f"{name}: expected a finite number of seconds >= {minimum:g}, got {env!r}")
    return v


@dataclass(frozen=True)
class RayCostModel:
    """Expected wall time of a job on the local executor and on Ray, and their ratio.

    A job is ``units`` units of work (env steps) of ``unit_s`` seconds each, split into ``tasks`` tasks:

    - local: ``units * unit_s``
    - Ray with ``workers`` workers: ``startup_s + units * unit_s / workers + tasks * task_overhead_s``

    ``workers`` is the parallelism the job gets (not more than the cores it runs on). The defaults are
    measured (:data:`DEFAULT_RAY_STARTUP_S`, :data:`DEFAULT_RAY_TASK_OVERHEAD_S`); :meth:`from_env`
    reads ``$PRM_RAY_STARTUP_S`` / ``$PRM_RAY_TASK_OVERHEAD_S`` over them.
    """

    startup_s: float = DEFAULT_RAY_STARTUP_S
    task_overhead_s: float = DEFAULT_RAY_TASK_OVERHEAD_S

    def __post_init__(self) -> None:
        for name in ("startup_s", "task_overhead_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}: expected a finite number of seconds >= 0, got {v!r}")

    @classmethod
    def from_env(cls) -> "RayCostModel":
        """The defaults, each overridden by its environment variable when set."""
        return cls(startup_s=_env_seconds("PRM_RAY_STARTUP_S", DEFAULT_RAY_STARTUP_S, 0.0),
                   task_overhead_s=_env_seconds("PRM_RAY_TASK_OVERHEAD_S", DEFAULT_RAY_TASK_OVERHEAD_S, 0.0))

    def local_s(self, units: float, unit_s: float) -> float:
        """Expected seconds on the local executor."""
        return units * unit_s

    def ray_s(self, units: float, unit_s: float, workers: int, tasks: float) -> float:
        """Expected seconds on Ray with ``workers`` workers, start-up and shutdown included."""
        return self.startup_s + units * unit_s / workers + tasks * self.task_overhead_s

    def speedup(self, units: float, unit_s: float, workers: int, tasks: float) -> float:
        """Expected local seconds / Ray seconds (above 1: Ray is faster)."""
        ray = self.ray_s(units, unit_s, workers, tasks)
        return self.local_s(units, unit_s) / ray if ray > 0 else math.inf

    def crossover_s(self, workers: int, task_s: float) -> float:
        """Seconds of local work at which Ray with ``workers`` workers is as fast as local (speed-up 1), for
        tasks of ``task_s`` seconds of local work each; ``inf`` when Ray never catches up (one worker)."""
        gain = 1.0 - 1.0 / workers - (self.task_overhead_s / task_s if task_s > 0 else math.inf)
        return self.startup_s / gain if gain > 0 else math.inf


def expected_speedup(units: float, unit_s: float, workers: int, *, tasks: float = 0,
                     model: RayCostModel | None = None) -> float:
    """Expected speed-up of Ray with ``workers`` workers over the local executor for a job of ``units``
    units of ``unit_s`` seconds in ``tasks`` tasks (:class:`RayCostModel`; ``model=None``: its defaults
    with the environment's overrides)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
    for name, v in (("units", units), ("unit_s", unit_s), ("tasks", tasks)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name}: expected a finite number >= 0, got {v!r}")
    return (model or RayCostModel.from_env()).speedup(units, unit_s, workers, tasks)


@dataclass(frozen=True)
class JobEstimate:
    """What a job will cost, known before it starts: ``units`` env steps of ``unit_s`` seconds each
    (measured here), in ``tasks`` executor tasks; ``what`` describes it (``"96 states, 384 rollouts"``).
    ``units == 0`` with a ``what``: there is no executor work (``what`` says why)."""

    units: float
    unit_s: float
    tasks: int
    what: str


def ray_installed() -> bool:
    """Whether ``import ray`` would find Ray (without importing it)."""
    import importlib.util

    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def check_executor(executor: "str | Executor", *, workers: int | None = None, address: str | None = None) -> None:
    """Refuse a bad ``executor`` / ``workers`` / ``address`` at once (before anything is written):
    ``"auto"`` takes what ``"ray"`` takes."""
    if executor == "auto":
        RayExecutor(workers, address=address)
    else:
        make_executor(executor, workers=workers, address=address)


def _parallel(workers: int | None, address: str | None) -> int | None:
    """Workers a Ray run gets for the model: ``workers``, at most this machine's cores for a local Ray
    instance (``None``: one per core); ``None`` for a cluster of unknown size."""
    cores = os.cpu_count() or 1
    if address is None:
        return min(workers or cores, cores)
    return workers


def _fmt_s(s: float) -> str:
    return f"~{s:,.0f} s" if s >= 10 else f"~{s:.1g} s" if s < 1 else f"~{s:.0f} s"


def _fmt_x(speedup: float) -> str:
    return f"{speedup:.2f}x" if speedup < 1 else f"{speedup:.1f}x"


def choose_executor(executor: "str | Executor", *, workers: int | None = None, address: str | None = None,
                    estimate: "Callable[[], JobEstimate] | JobEstimate | None" = None,
                    model: RayCostModel | None = None, min_speedup: float = AUTO_MIN_SPEEDUP,
                    report: Callable[[str], None] | None = None) -> Executor:
    """The executor to run a job on, saying why in one line (``report``, default: stderr) before it starts.

    ``"local"`` or an :class:`Executor`: that one, nothing said. ``"ray"``: a :class:`RayExecutor`, and
    the expected speed-up over local (``estimate()``, :class:`RayCostModel`). ``"auto"``: local when Ray
    is not installed, when the job has no executor work, or when Ray's expected speed-up is below
    ``min_speedup``; Ray otherwise, or when ``address`` names a cluster of unknown size (``workers``
    not given). ``estimate`` is called at most once, and only for ``"ray"`` / ``"auto"``.
    """
    if executor == "local" or isinstance(executor, Executor):
        return make_executor(executor, workers=workers, address=address)
    if executor not in ("ray", "auto"):
        return make_executor(executor, workers=workers, address=address)  # the usual error
    check_executor(executor, workers=workers, address=address)
    say = report or (lambda line: print(line, file=sys.stderr, flush=True))
    auto = executor == "auto"
    if auto and isinstance(estimate, JobEstimate) and estimate.units <= 0:
        say(f"executor: auto picked local: {estimate.what}")
        return LocalExecutor()
    if not ray_installed():
        if auto:
            say(f"executor: auto picked local: Ray is not installed ({install_hint('ray')})")
            return LocalExecutor()
        return RayExecutor(workers, address=address)  # start() raises the error naming the extra
    m = model or RayCostModel.from_env()
    job = estimate() if callable(estimate) else estimate
    par = _parallel(workers, address)
    where = f"{par} workers" if par is not None else "one worker per CPU of the cluster"
    if job is None or par is None:
        why = "the job's size is unknown" if job is None else             "--address names a cluster whose worker count (and so the speed-up) is known once connected"
        say(f"executor: {'auto picked ' if auto else ''}ray with {where}: {why}")
        return RayExecutor(workers, address=address)
    if job.units <= 0:
        if auto:
            say(f"executor: auto picked local: {job.what}")
            return LocalExecutor()
        say(f"executor: ray with {where}: {job.what}")
        return RayExecutor(workers, address=address)
    work = m.local_s(job.units, job.unit_s)
    su = m.speedup(job.units, job.unit_s, par, job.tasks)
    cross = m.crossover_s(par, work / max(job.tasks, 1))
    pays = f"Ray pays from {_fmt_s(cross)} of local work" if math.isfinite(cross) else "Ray never pays with one worker"
    detail = f"start-up {_fmt_s(m.startup_s)}, {_fmt_s(work)} of local work: {job.what}"
    if not auto:
        hint = "; --executor local would be faster" if su < 1 else ""
        say(f"executor: ray with {where}, expected {_fmt_x(su)} local ({detail}){hint}")
        return RayExecutor(workers, address=address)
    if su >= min_speedup:
        say(f"executor: auto picked ray with {where}: expected {_fmt_x(su)} local ({detail})")
        return RayExecutor(workers, address=address)
    say(f"executor: auto picked local: ray with {where} expected {_fmt_x(su)} local ({detail}; {pays}, "
        f"auto picks it from {min_speedup:g}x)")
    return LocalExecutor()


def make_executor(executor: "str | Executor" = "local", *, workers: int | None = None, address: str | None = None,
                  runtime_env: dict | None = None) -> Executor:
    """The executor named ``executor`` (``"local"`` or ``"ray"``), or ``executor`` itself if it already is one.

    ``workers`` / ``address`` / ``runtime_env`` apply to ``"ray"``; the local executor runs one worker
    (this process) and refuses ``workers > 1`` and ``address``.
    """
    if isinstance(executor, Executor):
        if workers is not None or address is not None or runtime_env is not None:
            raise ValueError("workers/address/runtime_env: set them on the executor object, not next to it")
        return executor
    if executor == "local":
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers != 1):
            raise ValueError(f"workers: the local executor runs tasks in this process (1 worker), got {workers!r}; "
                             "pass executor='ray' (--executor ray) for more workers")
        if address is not None:
            raise ValueError(f"address: only the Ray executor connects to a cluster, got address={address!r} with "
                             "executor='local'; pass executor='ray' (--executor ray)")
        return LocalExecutor()
    if executor == "ray":
        return RayExecutor(workers, address=address, runtime_env=runtime_env)
    if executor == "auto":
        raise ValueError("executor: 'auto' chooses from the job's size, which make_executor does not know; "
                         "collect() and label() take executor='auto' (or use choose_executor)")
    raise ValueError(f"executor: expected one of {list(EXECUTORS)} or an Executor, got {executor!r}")
