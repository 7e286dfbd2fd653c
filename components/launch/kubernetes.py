"""Kubernetes backend: create a TrainJob, follow its status conditions, fetch its outputs.

Follows the job by polling `get` (a watch would need re-listing after every disconnect; a poll
every few seconds costs nothing next to a training run). Conditions as Trainer 2.3 reports
them: `Complete` / `Failed` (True ends the wait; Failed's reason and message become the step's
error, e.g. DeadlineExceeded or the JobSet's failure), `Suspended` (waits). The job is deleted
when the step is cancelled (SIGTERM from KFP), on timeout, and on any error after creation;
its owner reference to the step's pod covers the step dying without a chance to clean up.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from invfold import storage
from invfold.components.launch import schema, trainjob
from invfold.components.launch.base import Launcher, LaunchError, LaunchResult, Resources
from invfold.components.train.config import TrainConfig

log = logging.getLogger(__name__)


class Cancelled(LaunchError):
    """The step was asked to stop (SIGTERM/SIGINT); the TrainJob has been deleted."""


def custom_objects_api():
    """The in-cluster CustomObjectsApi (the step's service account)."""
    from kubernetes import client, config

    config.load_incluster_config()
    return client.CustomObjectsApi()


def condition(job: dict, kind: str) -> dict | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and str(cond.get("status")) == "True":
            return cond
    return None


class KubernetesLauncher(Launcher):
    name = "kubernetes"

    def __init__(
        self,
        options: trainjob.ClusterOptions,
        api=None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        fetch: Callable[[str, str], None] | None = None,
    ):
        self.options = options
        self._api = api
        self.clock, self.sleep = clock, sleep
        self.fetch = fetch or _fetch_folder

    @property
    def api(self):
        if self._api is None:
            self._api = custom_objects_api()
        return self._api

    def _call(self, method: str, **kwargs):
        return getattr(self.api, method)(
            group=trainjob.GROUP,
            version=trainjob.VERSION,
            namespace=self.options.namespace,
            plural=trainjob.PLURAL,
            **kwargs,
        )

    def run(self, cfg: TrainConfig, resources: Resources) -> LaunchResult:
        opts = self.options
        if not opts.storage_root:
            raise LaunchError(
                "train on Kubernetes: set the storage root (object-storage URI the "
                "TrainJob writes its outputs to, e.g. s3://bucket/invfold)"
            )
        if not opts.namespace:
            raise LaunchError("train on Kubernetes: namespace unknown (not in a pod and none given)")
        name = trainjob.job_name(cfg.strategy, opts.pipeline_run_id)
        output_uri = f"{opts.storage_root.rstrip('/')}/runs/{name}"
        manifest = trainjob.build_trainjob(name, cfg, resources, opts, output_uri)
        schema.validate(manifest, source=f"TrainJob {name}")
        previous = _trap_signals()
        created = False
        try:
            self._call("create_namespaced_custom_object", body=manifest)
            created = True
            log.info(
                "created TrainJob %s/%s (runtime %s, %d x %d processes, %d GPUs/node)",
                opts.namespace,
                name,
                manifest["spec"]["runtimeRef"]["name"],
                resources.nodes,
                resources.procs_per_node,
                resources.gpus_per_node,
            )
            job = self._wait(name)
            self.fetch(output_uri, cfg.out)
            created = False  # finished: leave it for inspection; the owner reference cleans up
            return LaunchResult(
                out=cfg.out,
                backend=self.name,
                job_name=name,
                details={
                    "namespace": opts.namespace,
                    "output_uri": output_uri,
                    "conditions": (job.get("status") or {}).get("conditions", []),
                },
            )
        finally:
            _restore_signals(previous)
            if created:
                self._delete(name)

    def _wait(self, name: str) -> dict:
        deadline = self.clock() + self.options.timeout_s
        last_state = None
        while True:
            job = self._call("get_namespaced_custom_object", name=name)
            failed = condition(job, "Failed")
            if failed:
                raise LaunchError(
                    f"TrainJob {self.options.namespace}/{name} failed: "
                    f"{failed.get('reason', 'Failed')}: {failed.get('message', '(no message)')}"
                )
            if condition(job, "Complete"):
                log.info("TrainJob %s complete", name)
                return job
            state = "suspended" if condition(job, "Suspended") else "running"
            if state != last_state:
                log.info("TrainJob %s %s", name, state)
                last_state = state
            if self.clock() >= deadline:
                raise LaunchError(
                    f"TrainJob {self.options.namespace}/{name} did not finish within "
                    f"{self.options.timeout_s:.0f} s; job deleted"
                )
            self.sleep(self.options.poll_s)

    def _delete(self, name: str) -> None:
        try:
            self._call("delete_namespaced_custom_object", name=name, propagation_policy="Foreground")
            log.info("deleted TrainJob %s", name)
        except Exception as err:  # the owner reference still removes it with the step's pod
            log.warning("could not delete TrainJob %s: %s", name, err)


def _trap_signals() -> dict:
    """SIGTERM/SIGINT raise Cancelled where the step waits, so `run`'s cleanup deletes the job."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        log.warning("signal %d: deleting the TrainJob", signum)
        raise Cancelled(f"step cancelled by signal {signum}; TrainJob deleted")

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}


def _restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _fetch_folder(uri: str, local: str) -> None:
    """Copy the job's output folder from object storage to the step's local folder."""

    if not storage.exists(uri):
        raise LaunchError(f"the TrainJob completed but left no outputs at {uri}")
    storage.download_folder(uri, local)
