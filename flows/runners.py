"""The Prefect task runner a build's ``execution`` section asks for.

- ``threads``: a thread pool of ``max_workers`` in the flow's own process (the default).
- ``dask``: worker processes, one thread each, so the GIL does not serialise composition; a local
  cluster of ``max_workers``, or the scheduler at ``dask_address``. Tasks
  tagged ``gpu`` also ask Dask for the abstract resource ``GPU: 1``, but only when some worker
  declares that resource (``dask-worker --resources GPU=1``): a request no worker can meet would
  wait for ever, so on a CPU-only cluster they run like any other task.
- ``ray``: a local Ray instance of ``max_workers`` CPUs, or the cluster at ``ray_address``.

Workers of a local cluster are told the API this process talks to (``PREFECT_API_URL``): without it
each worker process started an ephemeral Prefect server of its own on its first task (about 12 s
before the first task ran, and one more server competing for the cores). Remote workers need
``PREFECT_API_URL`` set on their machines (deployments/README.md).

In every worker process OpenCV is held to one thread: its pool ignores ``OMP_NUM_THREADS`` (which
Dask and Ray already set to 1 for torch and BLAS), and one pool per worker process would
oversubscribe the cores.

dask and ray are imported only when asked for, so the default build does not pay for them.
"""

from __future__ import annotations

import functools
import importlib
import uuid
from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from synrail.config import BuildConfig, ExecutionConfig

GPU_TAG = "gpu"
# Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536; setting it at all turns off glibc's
# adaptive mmap threshold, so every image-sized array is a fresh mmap, page-faulted and unmapped: a
# background took 2.3 s instead of 0.7 s (benchmarks/scale.py). None unsets it for local clusters;
# remote workers need the same (deployments/README.md).
KEEP_GLIBC_MMAP_THRESHOLD = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
# Dask's statistical profiler samples every worker thread each 10 ms to feed the dashboard, which a
# local cluster here runs without: ~6 % of a worker's Python time on a build
NO_WORKER_PROFILER = {"distributed.worker.profile.enabled": False}
# OpenCV reads this when its thread pool starts; for Ray workers, which we do not set up ourselves
OPENCV_ONE_THREAD = {"OPENCV_FOR_THREADS_NUM": "1"}


class TaskRunnerUnavailable(RuntimeError):
    """The configured task runner's package is not installed."""


def task_runner_for(config: BuildConfig) -> TaskRunner:
    """A fresh task runner for ``config.execution`` (a runner is entered once per flow run)."""
    execution = config.execution
    if execution.task_runner == "dask":
        return dask_task_runner(execution)
    if execution.task_runner == "ray":
        return ray_task_runner(execution)
    return ThreadPoolTaskRunner(max_workers=execution.max_workers)


def dask_task_runner(execution: ExecutionConfig) -> TaskRunner:
    runner_class = _dask_runner_class()
    if execution.dask_address:
        return runner_class(address=execution.dask_address)
    return runner_class(cluster_kwargs={"n_workers": execution.max_workers, "threads_per_worker": 1,
                                        "processes": True, "dashboard_address": None})


def ray_task_runner(execution: ExecutionConfig) -> TaskRunner:
    task_runners = _import("prefect_ray.task_runners", "ray", 'pip install "synrail[ray]"')
    env_vars = dict(OPENCV_ONE_THREAD)
    init_kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env_vars}}
    if not execution.ray_address:
        init_kwargs["num_cpus"] = execution.max_workers
        env_vars["PREFECT_API_URL"] = api_url_for_workers()
    return task_runners.RayTaskRunner(address=execution.ray_address, init_kwargs=init_kwargs)


def api_url_for_workers() -> str:
    """The Prefect API this process uses: its settings' or the ephemeral server it has started."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url).rstrip("/")


def _import(module: str, runner: str, install: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TaskRunnerUnavailable(f"execution.task_runner {runner!r} needs {module.split('.')[0]}, which is "
                                    f"not installed ({exc}); install it with: {install}") from exc


@functools.cache
def _dask_runner_class() -> type[TaskRunner]:
    """DaskTaskRunner plus the GPU resource and the one-thread OpenCV (defined here: dask is imported lazily)."""
    task_runners = _import("prefect_dask.task_runners", "dask", 'pip install "prefect-dask>=0.3.7"')
    import dask
    from distributed.diagnostics.plugin import WorkerPlugin

    class OneOpenCVThread(WorkerPlugin):
        idempotent = True  # once per worker, however many flow runs connect

        def setup(self, worker: Any) -> None:
            import cv2

            cv2.setNumThreads(1)

    class SynRailDaskTaskRunner(task_runners.DaskTaskRunner):
        def __enter__(self) -> SynRailDaskTaskRunner:
            self._gpu_workers: bool | None = None
            if _in_dask_worker():
                # Prefect enters a copy of the flow's runner around every task run in a worker; it
                # must stay lazy there (setting up here made a Prefect and a Dask client per task)
                return super().__enter__()
            # read when a local cluster's nannies start its workers; ``nanny.environ`` is set in the
            # worker only (``pre-spawn-environ`` also lands in this process's environment, for good)
            with dask.config.set({**KEEP_GLIBC_MMAP_THRESHOLD, **NO_WORKER_PROFILER,
                                  "distributed.nanny.environ.PREFECT_API_URL": api_url_for_workers()}):
                super().__enter__()
                # a plugin reaches the workers of an existing cluster too, and those that join later
                self.client.register_plugin(OneOpenCVThread(), name="synrail-one-opencv-thread")
            return self

        def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None,
                   dependencies: Any = None) -> Any:
            if GPU_TAG in task.tags and self.has_gpu_workers():
                with dask.annotate(resources={"GPU": 1}):
                    return self._submit_with_key(task, parameters, wait_for, dependencies)
            return self._submit_with_key(task, parameters, wait_for, dependencies)

        def _submit_with_key(self, task: Any, parameters: dict[str, Any], wait_for: Any,
                             dependencies: Any) -> Any:
            """``DaskTaskRunner.submit`` with a Dask key of our own: without one Dask makes it by
            tokenizing the task and every parameter (cloudpickling what it cannot hash), a third of
            this process's CPU on a build (prefect#18191); a Prefect task run is never deduplicated by
            that key anyway, since its fresh task-run id is among the arguments."""
            if not self._started:
                raise RuntimeError("The task runner must be started before submitting work.")
            future = self.client.submit(
                task, key=f"{task.name}-{uuid.uuid4().hex}", parameters=self._optimize_futures(parameters),
                wait_for=self._optimize_futures(wait_for) if wait_for else None, dependencies=dependencies,
                return_type="state")
            return task_runners.PrefectDaskFuture(wrapped_future=future, task_run_id=future.task_run_id)

        def has_gpu_workers(self) -> bool:
            """Whether any worker declares a ``GPU`` resource (asked once per flow run)."""
            if self._gpu_workers is None:
                workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
                self._gpu_workers = any(w.get("resources", {}).get("GPU", 0) > 0 for w in workers)
            return self._gpu_workers

    return SynRailDaskTaskRunner


def _in_dask_worker() -> bool:
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True
