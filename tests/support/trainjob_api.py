"""A local stand-in of the Kubeflow Trainer v2 TrainJob API: the subset of the Kubernetes
CustomObjectsApi the launcher uses (create / get / delete of trainjobs.trainer.kubeflow.org),
with status conditions shaped as Trainer 2.3 reports them.

Behaviours per created job (`outcome`):
- "complete": Complete=True after `polls_until_done` gets (JobsCreationSucceeded meanwhile).
- "fail": Failed=True with `reason` / `message` after `polls_until_done` gets.
- "hang": never finishes (timeouts and cancellation).
- "execute": runs the TrainJob's own command on this machine (torchrun / mpirun translated to
  local launchers, the job's env applied) and reports Complete or Failed from its exit status.
Every created manifest is checked against the strict schema, as the API server's structural
schema would (unknown fields are rejected rather than pruned, to surface them in tests)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from invfold.components.launch import schema
from invfold.components.launch.kubernetes import KubernetesLauncher
from invfold.components.launch.trainjob import ClusterOptions
from invfold.components.train.config import TrainConfig
from tests.support.training import tiny_config

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"


class ApiException(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(f"({status}) {reason}")
        self.status, self.reason = status, reason


def _condition(kind: str, reason: str, message: str) -> dict:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}


class TrainJobApi:
    def __init__(
        self,
        outcome: str = "complete",
        polls_until_done: int = 2,
        reason: str = "FailedJobs",
        message: str = "jobset failed: node-0 exited with code 1",
        on_get=None,
        nproc_env=None,
        spec_fields: set[str] | None = None,
    ):
        """spec_fields: the TrainJob spec fields an older Trainer's CRD declares (None: v2.3's,
        checked by the strict schema)."""
        self.spec_fields = spec_fields
        self.outcome, self.polls_until_done = outcome, polls_until_done
        self.reason, self.message = reason, message
        self.on_get = on_get
        self.jobs: dict[tuple[str, str], dict] = {}
        self.created: list[dict] = []
        self.deleted: list[str] = []
        self.propagation: list[str | None] = []  # each delete's propagation_policy
        self.gets = 0

    def _check(self, group, version, plural):
        if (group, version, plural) != (GROUP, VERSION, PLURAL):
            raise ApiException(404, f"no resource {plural}.{group}/{version}")

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, field_validation=None):
        self._check(group, version, plural)
        if self.spec_fields is not None:
            # An older Trainer's CRD: the API server prunes fields its structural schema lacks, or
            # refuses them under fieldValidation=Strict (Kubernetes server-side field validation).
            unknown = sorted(set(body["spec"]) - self.spec_fields)
            if unknown and field_validation == "Strict":
                fields = ", ".join(f'unknown field "spec.{f}"' for f in unknown)
                raise ApiException(400, f"strict decoding error: {fields}")
            body = copy.deepcopy(body)
            for f in unknown:
                del body["spec"][f]
        else:
            schema.validate(body, source="stand-in API server")
        name = body["metadata"]["name"]
        if (namespace, name) in self.jobs:
            raise ApiException(409, f"trainjobs {name} already exists")
        job = copy.deepcopy(body)
        job["metadata"].setdefault("namespace", namespace)
        job["status"] = {"conditions": []}
        self.jobs[(namespace, name)] = job
        self.created.append(copy.deepcopy(body))
        if self.outcome == "execute":
            code = run_locally(job)
            cond = (
                _condition("Complete", "JobSetCompleted", "jobset completed")
                if code == 0
                else _condition("Failed", "FailedJobs", f"trainer node exited with code {code}")
            )
            job["status"]["conditions"].append(cond)
        return copy.deepcopy(job)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self._check(group, version, plural)
        self.gets += 1
        if self.on_get:
            self.on_get(self.gets)
        job = self.jobs.get((namespace, name))
        if job is None:
            raise ApiException(404, f"trainjobs {name} not found")
        conditions = job["status"]["conditions"]
        if self.outcome in ("complete", "fail") and not conditions and self.gets >= self.polls_until_done:
            conditions.append(
                _condition("Complete", "JobSetCompleted", "jobset completed")
                if self.outcome == "complete"
                else _condition("Failed", self.reason, self.message)
            )
        return copy.deepcopy(job)

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=""):
        self._check(group, version, plural)
        wanted = dict(item.split("=", 1) for item in label_selector.split(",") if item)
        items = [
            copy.deepcopy(job)
            for (ns, _), job in self.jobs.items()
            if ns == namespace and all(job["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]
        return {"items": items}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        self._check(group, version, plural)
        if self.jobs.pop((namespace, name), None) is None:
            raise ApiException(404, f"trainjobs {name} not found")
        self.deleted.append(name)
        self.propagation.append(kwargs.get("propagation_policy"))
        return {"status": "Success"}


def run_locally(job: dict) -> int:
    """Run the TrainJob's command as the runtime would on one node: torchrun with the job's
    numProcPerNode; the env entries with literal values applied (secretKeyRef ones are looked
    up in this process's environment, as if the Secret held them)."""
    trainer = job["spec"]["trainer"]
    env = dict(os.environ)
    for item in trainer.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["name"] in os.environ:
            env[item["name"]] = os.environ[item["name"]]
    command = list(trainer["command"]) + list(trainer.get("args", []))
    if command[0] != "torchrun":
        raise NotImplementedError(f"stand-in runs torchrun jobs only, got {command[0]}")
    local = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={trainer['numProcPerNode']}",
        *command[1:],
    ]
    return subprocess.run(local, env=env).returncode


def tiny(data: str, out: Path, **overrides) -> TrainConfig:
    """The training tests' tiny config, shorter: 3 steps, nothing saved on the way."""
    options = dict(max_steps=3, checkpoint_every=0, validate_every=0, dist_timeout_s=60.0, lr=2e-3)
    return tiny_config(data, out, **{**options, **overrides})


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def launcher(api: TrainJobApi, tmp_path: Path, clock: FakeClock | None = None, **options) -> KubernetesLauncher:
    clock = clock or FakeClock()
    fetched = []

    def fetch(uri: str, out: str) -> None:
        fetched.append(uri)
        os.makedirs(out, exist_ok=True)
        Path(out, "model.pt").write_bytes(b"weights")

    opts = ClusterOptions(
        namespace="team-a",
        storage_root=f"file://{tmp_path}/store",
        pipeline_run_id="run-7",
        poll_s=5.0,
        timeout_s=options.pop("timeout_s", 3600.0),
        owner_pod_name="step-pod",
        owner_pod_uid="uid-1",
        **options,
    )
    result = KubernetesLauncher(opts, api=api, clock=clock, sleep=clock.sleep, fetch=fetch)
    result.fetched = fetched
    return result
