"""Kubernetes backend: create a TrainJob, follow its status conditions, fetch its outputs.

The TrainJob is created with strict field validation: an API server whose TrainJob schema lacks a
field the manifest sets (Trainer v2.1 has no `runtimePatches`, which carry GPU placement and the
workspace volume) refuses it instead of pruning it silently, and the step names the Trainer
version it needs. While the job runs, its pods are looked at too: a pod the scheduler cannot place
(no GPU node matching the selector, quota, taints) is reported with the scheduler's reason, and
so is a placed pod whose container cannot start (an image the node cannot pull, a missing Secret);
after `unschedulable_timeout_s` the job is deleted and the step fails with that reason instead
of waiting for the TrainJob's own timeout (days).

Follows the job by polling `get` (a watch would need re-listing after every disconnect; a poll
every few seconds costs nothing next to a training run). Conditions as Trainer 2.3 reports
them: `Complete` / `Failed` (True ends the wait; Failed's reason and message become the step's
error, e.g. DeadlineExceeded or the JobSet's failure), `Suspended` (waits). The job is deleted
when the step is cancelled (SIGTERM from KFP), on timeout, and on any error after creation;
its owner reference to the step's pod covers the step dying without a chance to clean up.
"""

from __future__ import annotations

import json
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


# The Trainer release whose TrainJob API has every field the launcher sets (runtimePatches came in
# v2.2; the launcher-only MPI runtimes rely on v2.3's node count: see trainjob.SINGLE_NODE_SUFFIX).
TRAINER_NEEDED = "v2.3"
# Trainer names the JobSet after the TrainJob; JobSet labels every pod with its name.
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


def custom_objects_api():
    """The in-cluster CustomObjectsApi (the step's service account)."""
    from kubernetes import client, config

    config.load_incluster_config()
    return client.CustomObjectsApi()


def core_api():
    """The in-cluster CoreV1Api (pods of the job, read only)."""
    from kubernetes import client, config

    config.load_incluster_config()
    return client.CoreV1Api()


def _status_reason(err: Exception) -> tuple[int | None, str]:
    status = getattr(err, "status", None)
    body = getattr(err, "body", None) or getattr(err, "reason", None) or str(err)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        body = json.loads(body).get("message", body)
    except (ValueError, AttributeError):
        pass
    return status, " ".join(str(body).split())


def _pending(pods):
    """(name, status) of each Pending pod, from API objects or their dicts."""
    for pod in pods:
        pod = pod if isinstance(pod, dict) else pod.to_dict()
        status = pod.get("status") or {}
        if status.get("phase") == "Pending":
            yield pod["metadata"]["name"], status


def unschedulable_pods(pods) -> list[tuple[str, str]]:
    """(pod name, the scheduler's reason and message) of every Pending pod it could not place."""
    found = []
    for name, status in _pending(pods):
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and str(cond.get("status")) == "False":
                reason = cond.get("reason") or "Unschedulable"
                found.append((name, f"{reason}: {cond.get('message') or '(no message)'}"))
    return found


# Waiting reasons of a container that will not start by itself: the image cannot be had, or its
# configuration names something missing (kubelet's images.ErrImagePull... and kuberuntime's errors).
UNSTARTABLE_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


def unstartable_pods(pods) -> list[tuple[str, str]]:
    """(pod name, the container, its waiting reason and message) of every pod placed on a node
    whose container cannot start: an image the node cannot pull (a wrong tag, a private registry
    without imagePullSecrets, an air-gapped node), or a Secret or ConfigMap it names that is missing."""
    found = []
    for name, status in _pending(pods):
        for container in (status.get("init_container_statuses") or status.get("initContainerStatuses") or []) + (
            status.get("container_statuses") or status.get("containerStatuses") or []
        ):
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in UNSTARTABLE_REASONS:
                found.append(
                    (
                        name,
                        f"container {container.get('name')}: {waiting['reason']}: "
                        f"{waiting.get('message') or '(no message)'}",
                    )
                )
                break
    return found


def crashed_containers(pods) -> list[tuple[str, str]]:
    """(pod name, the container, its exit code, reason and restarts) of every container that
    exited non-zero, now or before its current restart: a rank that crashed."""
    found = []
    for pod in pods:
        pod = pod if isinstance(pod, dict) else pod.to_dict()
        status = pod.get("status") or {}
        for container in status.get("container_statuses") or status.get("containerStatuses") or []:
            last = container.get("last_state") or container.get("lastState") or {}
            ended = (container.get("state") or {}).get("terminated") or last.get("terminated") or {}
            code = ended.get("exit_code", ended.get("exitCode"))
            if code not in (0, None):
                restarts = container.get("restart_count", container.get("restartCount")) or 0
                found.append(
                    (
                        pod["metadata"]["name"],
                        f"container {container.get('name')} exited {code} ({ended.get('reason') or 'Error'}), "
                        f"restarted {restarts} times",
                    )
                )
    return found


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
        pods_api=None,
    ):
        self.options = options
        self._api = api
        self._pods_api = pods_api
        self._pods_visible = True
        self.clock, self.sleep = clock, sleep
        self.fetch = fetch or _fetch_folder

    @property
    def pods_api(self):
        if self._pods_api is None:
            self._pods_api = core_api()
        return self._pods_api

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
                "train on Kubernetes: set the storage root (pipeline parameter storage_root: the object-storage "
                "URI the TrainJob writes its outputs to; on KFP's store "
                f"{trainjob.default_storage_root(opts.namespace or '<namespace>')})"
            )
        if not opts.namespace:
            raise LaunchError("train on Kubernetes: namespace unknown (not in a pod and none given)")
        problem = trainjob.storage_root_problem(opts.storage_root, opts.namespace)
        if problem:
            raise LaunchError(f"train on Kubernetes: {problem}")
        name = trainjob.job_name(cfg.strategy, opts.pipeline_run_id)
        output_uri = f"{opts.storage_root.rstrip('/')}/runs/{name}"
        manifest = trainjob.build_trainjob(name, cfg, resources, opts, output_uri)
        schema.validate(manifest, source=f"TrainJob {name}")
        previous = _trap_signals()
        created = False
        try:
            self._delete_orphans()
            self._create(name, manifest)
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

    def _delete_orphans(self) -> None:
        """Delete the unfinished TrainJobs an earlier attempt of this run's train step left (a step
        pod killed without running its cleanup: KFP never deletes the pod, so the job's owner
        reference to it never fires, and the orphan holds GPUs and quota the retry waits on)."""
        if not self.options.pipeline_run_id:
            return
        selector = f"{trainjob.RUN_LABEL}={trainjob.run_label(self.options.pipeline_run_id)}"
        listed = self._call("list_namespaced_custom_object", label_selector=selector)
        for job in listed.get("items", []):
            if condition(job, "Complete") or condition(job, "Failed"):
                continue
            orphan = job["metadata"]["name"]
            log.warning("deleting TrainJob %s left running by an earlier attempt of this run", orphan)
            self._delete(orphan)

    def _create(self, name: str, manifest: dict) -> None:
        try:
            self._call("create_namespaced_custom_object", body=manifest, field_validation="Strict")
        except Exception as err:
            status, detail = _status_reason(err)
            if status in (400, 422) and "unknown field" in detail:
                raise LaunchError(
                    f"TrainJob {self.options.namespace}/{name}: the cluster's TrainJob API refused fields "
                    f"invfold sets ({detail[:300]}): invfold needs Kubeflow Trainer {TRAINER_NEEDED} or later "
                    f"(Trainer v2.1, as in kubeflow/manifests 26.03, has no spec.runtimePatches and would drop "
                    f"GPU placement and the workspace volume silently); upgrade Trainer"
                ) from None
            raise

    def _check_pods(self, name: str, first_seen: dict[str, float], crashes: dict[str, str]) -> None:
        """Report pods the scheduler cannot place (fail once one stayed so past the bounded wait)
        and ranks that crashed (kept in `crashes` for the job's failure: its pods may be gone by then)."""
        opts = self.options
        try:
            listed = self.pods_api.list_namespaced_pod(opts.namespace, label_selector=f"{JOBSET_LABEL}={name}")
        except Exception as err:  # no pod rights (an older Role): keep following the conditions
            status, detail = _status_reason(err)
            log.warning(
                "cannot list the pods of TrainJob %s (%s %s): unschedulable pods go unreported", name, status, detail
            )
            self._pods_visible = False
            return
        items = listed.get("items", []) if isinstance(listed, dict) else listed.items
        for pod, what in crashed_containers(items):
            if crashes.get(pod) != what:
                log.warning("TrainJob %s: pod %s: %s", name, pod, what)
                crashes[pod] = what
        unplaced = dict(unschedulable_pods(items))
        stuck = {**dict(unstartable_pods(items)), **unplaced}
        now = self.clock()
        for pod in list(first_seen):
            if pod not in stuck:
                del first_seen[pod]
        for pod, why in stuck.items():
            what = "be scheduled" if pod in unplaced else "start"
            if pod not in first_seen:
                first_seen[pod] = now
                log.warning("TrainJob %s: pod %s cannot %s: %s", name, pod, what, why)
            waited = now - first_seen[pod]
            if waited < opts.unschedulable_timeout_s:
                continue
            if pod in unplaced:
                check = (
                    "the GPU node selector and tolerations (pipeline parameters gpu_node_selector, "
                    "gpu_tolerations), gpus_per_node against the nodes' allocatable nvidia.com/gpu, and the "
                    "namespace's ResourceQuota"
                )
            else:
                check = (
                    "that the nodes can pull the image (its name and tag, the registry's imagePullSecrets in "
                    "the namespace) and that every Secret the pod names exists there"
                )
            raise LaunchError(
                f"TrainJob {opts.namespace}/{name}: pod {pod} could not {what} for {waited:.0f} s: {why}. "
                f"Check {check}; job deleted"
            )

    def _wait(self, name: str) -> dict:
        deadline = self.clock() + self.options.timeout_s
        last_state = None
        first_seen: dict[str, float] = {}
        crashes: dict[str, str] = {}
        while True:
            job = self._call("get_namespaced_custom_object", name=name)
            failed = condition(job, "Failed")
            if failed:
                ns = self.options.namespace
                crashed = "".join(
                    f"; {pod}: {what} (kubectl logs -n {ns} {pod} --previous)" for pod, what in crashes.items()
                )
                raise LaunchError(
                    f"TrainJob {ns}/{name} failed: "
                    f"{failed.get('reason', 'Failed')}: {failed.get('message', '(no message)')}{crashed}"
                )
            if condition(job, "Complete"):
                log.info("TrainJob %s complete", name)
                return job
            state = "suspended" if condition(job, "Suspended") else "running"
            if state == "running" and self.options.unschedulable_timeout_s > 0 and self._pods_visible:
                self._check_pods(name, first_seen, crashes)
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
        """In the background: the TrainJob goes at once and the garbage collector takes its JobSet
        and pods after it. Deleted in the foreground, an unfinished TrainJob waits for its JobSet,
        which the Trainer re-applies on every reconcile of a job not yet finished (v2.3.0
        pkg/controller/trainjob_controller.go: Reconcile never looks at the deletion timestamp):
        the job stayed deleting with its pods made and killed every few seconds."""
        try:
            self._call("delete_namespaced_custom_object", name=name, propagation_policy="Background")
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
