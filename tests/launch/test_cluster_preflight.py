"""What the train step checks on a cluster before and while its TrainJob runs, against stand-ins
of the API server's answers (tests/support/trainjob_api.py):

- Trainer version: the TrainJob is created with fieldValidation=Strict, so a Trainer whose CRD
  lacks a field invfold sets is refused by name instead of pruned. Upstream facts: Trainer v2.1.0's
  TrainJobSpec declares runtimeRef, initializer, trainer, labels, annotations,
  podTemplateOverrides, suspend, managedBy (no runtimePatches, added in v2.2.0):
  kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.1.0 / v2.2.0; an API server
  prunes unknown fields of a structural CRD and refuses them with "strict decoding error: unknown
  field" under fieldValidation=Strict (Kubernetes server-side field validation, GA in 1.27).
- Unschedulable pods: Trainer names the JobSet after the TrainJob (pkg/runtime/framework/plugins/
  jobset/jobset.go, v2.3.0) and JobSet labels its pods jobset.sigs.k8s.io/jobset-name; the
  scheduler marks a pod it cannot place with PodScheduled=False, reason Unschedulable.
- The storage root in KFP's bucket: a profile's keys may write only mlpipeline/{artifacts,
  private-artifacts/<ns>, private/<ns>, shared}/* (kubeflow/pipelines 2.17.0 manifests/kustomize/
  base/installs/multi-user/pipelines-profile-controller/sync.py)."""

from __future__ import annotations

import pytest

from invfold.components.launch import LaunchError, Resources
from invfold.components.launch.kubernetes import (
    JOBSET_LABEL,
    crashed_containers,
    unschedulable_pods,
    unstartable_pods,
)
from invfold.components.launch.trainjob import ClusterOptions, storage_root_problem
from tests.support.trainjob_api import FakeClock, TrainJobApi, launcher, tiny

TRAINER_V2_1_SPEC = {
    "runtimeRef",
    "initializer",
    "trainer",
    "labels",
    "annotations",
    "podTemplateOverrides",
    "suspend",
    "managedBy",
}
GPU_POOL = {"node_selector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}


def test_an_old_trainer_is_named_instead_of_dropping_gpu_placement(tmp_path):
    api = TrainJobApi("complete", spec_fields=TRAINER_V2_1_SPEC)
    k8s = launcher(api, tmp_path, **GPU_POOL)
    with pytest.raises(LaunchError, match=r"Kubeflow Trainer v2\.3 or later.*runtimePatches"):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources(nodes=1, procs_per_node=1))
    assert api.created == [] and api.jobs == {}


def test_without_strict_validation_the_old_trainer_would_prune_silently(tmp_path):
    """What happened before: the same create without fieldValidation succeeds with the GPU
    placement gone."""
    api = TrainJobApi("complete", spec_fields=TRAINER_V2_1_SPEC)
    body = {"metadata": {"name": "j"}, "spec": {"runtimeRef": {}, "trainer": {}, "runtimePatches": [{}]}}
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "a", "trainjobs", body)
    assert "runtimePatches" not in api.created[0]["spec"]


class Pods:
    """CoreV1Api.list_namespaced_pod: the job's pods, Pending and unschedulable."""

    def __init__(self, pending: bool = True):
        self.pending, self.selectors = pending, []

    def list_namespaced_pod(self, namespace, label_selector):
        self.selectors.append(label_selector)
        job = label_selector.split("=", 1)[1]
        status = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        if self.pending:
            status = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
                    }
                ],
            }
        return {"items": [{"metadata": {"name": f"{job}-node-0-0-abcde"}, "status": status}]}


def test_an_unschedulable_pod_fails_the_step_with_the_schedulers_reason(tmp_path):
    clock = FakeClock()
    api = TrainJobApi("hang")
    k8s = launcher(api, tmp_path, clock, unschedulable_timeout_s=600.0, **GPU_POOL)
    k8s._pods_api = Pods()
    with pytest.raises(
        LaunchError, match=r"could not be scheduled for 600 s: Unschedulable: 0/3 nodes .*gpu_node_selector"
    ):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    name = api.created[0]["metadata"]["name"]
    assert api.deleted == [name]
    assert k8s._pods_api.selectors[0] == f"{JOBSET_LABEL}={name}"
    assert 600.0 <= clock.now < 3600.0, "failed at the bounded wait, long before the job's timeout"


def test_scheduled_pods_are_left_alone(tmp_path):
    clock = FakeClock()
    api = TrainJobApi("complete", polls_until_done=200)
    k8s = launcher(api, tmp_path, clock, unschedulable_timeout_s=60.0)
    k8s._pods_api = Pods(pending=False)
    k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    assert clock.now > 60.0 and api.deleted == []


class PodsWithoutImage:
    """A pod placed on a node that cannot pull its image (kubelet's status as reported on a real
    cluster for a tag no registry has)."""

    def list_namespaced_pod(self, namespace, label_selector):
        job = label_selector.split("=", 1)[1]
        waiting = {"reason": "ErrImageNeverPull", "message": 'Container image "invfold/runtime:9.9" is not present'}
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "node", "state": {"waiting": waiting}}],
        }
        return {"items": [{"metadata": {"name": f"{job}-node-0-0-abcde"}, "status": status}]}


def test_a_pod_whose_image_cannot_be_pulled_fails_the_step_with_the_kubelets_reason(tmp_path):
    clock = FakeClock()
    api = TrainJobApi("hang")
    k8s = launcher(api, tmp_path, clock, unschedulable_timeout_s=300.0)
    k8s._pods_api = PodsWithoutImage()
    with pytest.raises(
        LaunchError, match=r"could not start for 300 s: container node: ErrImageNeverPull: .*imagePullSecrets"
    ):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    assert api.deleted == [api.created[0]["metadata"]["name"]]
    assert 300.0 <= clock.now < 3600.0


def test_a_container_creating_pod_is_not_reported():
    """ContainerCreating covers a long first pull of a large image: only the reasons that do not
    resolve by waiting count."""
    pod = PodsWithoutImage().list_namespaced_pod("a", f"{JOBSET_LABEL}=j")["items"][0]
    why = 'container node: ErrImageNeverPull: Container image "invfold/runtime:9.9" is not present'
    assert unstartable_pods([pod]) == [("j-node-0-0-abcde", why)]
    pod["status"]["containerStatuses"][0]["state"]["waiting"] = {"reason": "ContainerCreating"}
    assert unstartable_pods([pod]) == []


def test_unschedulable_pods_reads_the_scheduler_condition():
    pods = Pods().list_namespaced_pod("a", f"{JOBSET_LABEL}=j")["items"]
    assert unschedulable_pods(pods) == [
        (
            "j-node-0-0-abcde",
            pods[0]["status"]["conditions"][0]["reason"] + ": " + pods[0]["status"]["conditions"][0]["message"],
        )
    ]
    assert unschedulable_pods(Pods(pending=False).list_namespaced_pod("a", "x=j")["items"]) == []


@pytest.mark.parametrize(
    ("root", "namespace", "ok"),
    [
        ("s3://mlpipeline/private/team-a/invfold", "team-a", True),
        ("s3://mlpipeline/shared/invfold", "team-a", True),
        ("s3://mlpipeline/artifacts/invfold", "team-a", True),
        ("s3://mlpipeline/private/team-b/invfold", "team-a", False),
        ("s3://mlpipeline/invfold", "team-a", False),
        ("s3://mlpipeline/private/team-a", "team-a", True),
        ("s3://mlpipeline/invfold", "kubeflow", True),  # single-user: the store's admin keys
        ("s3://my-bucket/invfold", "team-a", True),  # not KFP's bucket
    ],
)
def test_a_root_the_profiles_keys_cannot_write_is_refused(root, namespace, ok):
    assert (storage_root_problem(root, namespace) is None) == ok


def test_the_step_refuses_it_before_creating_a_job(tmp_path):
    api = TrainJobApi("complete")
    k8s = launcher(api, tmp_path)
    k8s.options.storage_root = "s3://mlpipeline/invfold"
    with pytest.raises(LaunchError, match=r"s3://mlpipeline/private/team-a/invfold"):
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    assert api.created == []


def test_a_negative_unschedulable_wait_is_refused():
    with pytest.raises(ValueError, match="unschedulable_timeout_s"):
        ClusterOptions(namespace="a", unschedulable_timeout_s=-1)


def test_a_retry_deletes_the_job_an_unclean_death_left_running(tmp_path):
    """Attempt 1's pod died without cleanup (OOM-kill, node loss): its TrainJob keeps running,
    owned by a pod KFP never deletes. The retry (same pipeline run) deletes it first; a finished
    job of the run and another run's job stay."""
    from invfold.components.launch.trainjob import build_trainjob, job_name

    api = TrainJobApi("complete")
    first = launcher(api, tmp_path)
    cfg = tiny("s3://b/prepared", tmp_path / "out")

    def leave(run_id: str, finished: bool = False) -> str:
        first.options.pipeline_run_id = run_id
        name = job_name("ddp", run_id)
        body = build_trainjob(name, cfg, Resources(), first.options, f"s3://b/runs/{name}")
        api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "team-a", "trainjobs", body)
        if finished:
            api.jobs[("team-a", name)]["status"]["conditions"].append({"type": "Complete", "status": "True"})
        return name

    orphan, done, other = leave("run-7"), leave("run-7", finished=True), leave("run-8")
    retry = launcher(api, tmp_path)  # pipeline_run_id run-7
    result = retry.run(cfg, Resources())
    assert api.deleted == [orphan]
    assert {name for _, name in api.jobs} == {done, other, result.job_name}


class CrashingPods:
    """A running trainer pod whose container keeps exiting 1 (as kubelet reports a crash loop: the
    last termination under lastState, the restart under way in state)."""

    def list_namespaced_pod(self, namespace, label_selector):
        job = label_selector.split("=", 1)[1]
        container = {
            "name": "node",
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
        status = {"phase": "Running", "containerStatuses": [container]}
        return {"items": [{"metadata": {"name": f"{job}-node-0-0-abcde"}, "status": status}]}


def test_a_crashing_rank_is_named_when_the_job_fails(tmp_path, caplog):
    """Seen on a real cluster: every rank crashed at start-up four times and the JobSet failed
    six minutes later with `FailedJobs` alone; the step now says which pod's container exited
    with what, while it happens and in its failure."""
    clock = FakeClock()
    api = TrainJobApi("fail", polls_until_done=5)
    k8s = launcher(api, tmp_path, clock, unschedulable_timeout_s=300.0)
    k8s._pods_api = CrashingPods()
    with caplog.at_level("WARNING"), pytest.raises(LaunchError) as failed:
        k8s.run(tiny("s3://b/prepared", tmp_path / "out"), Resources())
    name = api.created[0]["metadata"]["name"]
    crash = f"{name}-node-0-0-abcde: container node exited 1 (Error), restarted 3 times"
    assert crash in str(failed.value) and "kubectl logs -n" in str(failed.value)
    assert [r.message for r in caplog.records if crash in r.message], caplog.text
    assert crashed_containers([CrashingPods().list_namespaced_pod("a", f"{JOBSET_LABEL}=j")["items"][0]]) == [
        ("j-node-0-0-abcde", "container node exited 1 (Error), restarted 3 times")
    ]
