"""HOME is writable in every image and every pod (caches: torch, triton, DeepSpeed, matplotlib, pip's).

A container's HOME is its `HOME` env entry, else the image user's home from the image's passwd
(the container runtime sets it): /home/invfold in the invfold images, /home/mlflow in the MLflow
image, and / for a uid the image does not know (PostgreSQL's official image run as 10001). On a
read-only root filesystem it must lie in a writable volume (emptyDir, ephemeral, a claim; mounted
read-write); on a writable one it must be the image user's own home (made by `useradd
--create-home` in the image) and the pod must run as that user.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.deploy_tools import REPO, documents, helm_template, pod_templates

IMAGES = REPO / "images"
WRITABLE_VOLUMES = ("emptyDir", "ephemeral", "persistentVolumeClaim")


def image_users() -> dict[str, tuple[int, str]]:
    """Image name -> (uid, home) of its final USER, from the Dockerfiles (an image built on
    another, `ARG BASE_IMAGE=invfold-...`, keeps its base's user)."""
    made, bases, final_uid = {}, {}, {}
    for dockerfile in IMAGES.glob("*/Dockerfile"):
        image, text = f"invfold-{dockerfile.parent.name}", dockerfile.read_text()
        for uid, name in re.findall(r"useradd --uid (\d+)\b[^\n]*--create-home[^\n]* (\w+)\s*$", text, re.M):
            made[image] = (int(uid), f"/home/{name}")
        base = re.search(r"^ARG BASE_IMAGE=(invfold-\w+)", text, re.M)
        if base:
            bases[image] = base.group(1)
        final_uid[image] = int(re.findall(r"^USER (\d+)", text, re.M)[-1])
    out = {}
    for image, uid in final_uid.items():
        origin = image
        while origin not in made:
            origin = bases[origin]
        assert made[origin][0] == uid, f"{image}: runs as {uid}, but {origin} made the home of {made[origin][0]}"
        out[image] = made[origin]
    return out


def test_every_image_gives_its_user_a_home_of_its_own():
    users = image_users()
    assert set(users) == {f"invfold-{d.parent.name}" for d in IMAGES.glob("*/Dockerfile")}
    assert users["invfold-runtime"] == (10001, "/home/invfold")
    assert users["invfold-deepspeed"] == users["invfold-horovod"] == (10001, "/home/invfold")
    assert users["invfold-mlflow"] == (10001, "/home/mlflow")


def home_problems(spec: dict, users: dict[str, tuple[int, str]]) -> list[str]:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    pod_uid = (spec.get("securityContext") or {}).get("runAsUser")
    problems = []
    for container in spec.get("initContainers", []) + spec["containers"]:
        image = container.get("image", "").rsplit("/", 1)[-1].split(":")[0]
        uid = int((container.get("securityContext") or {}).get("runAsUser") or pod_uid or -1)
        image_uid, image_home = users.get(image, (None, None))
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        home = env.get("HOME") or (image_home if uid == image_uid else "/")
        if (container.get("securityContext") or {}).get("readOnlyRootFilesystem"):
            writable = [
                m["mountPath"]
                for m in container.get("volumeMounts", [])
                if not m.get("readOnly") and any(k in volumes.get(m["name"], {}) for k in WRITABLE_VOLUMES)
            ]
            if not any(home == path or home.startswith(path.rstrip("/") + "/") for path in writable):
                problems.append(f"{container['name']}: HOME {home} on a read-only root, writable mounts {writable}")
        elif home != image_home:
            problems.append(f"{container['name']}: HOME {home} is not the home {image_home} of uid {image_uid}")
    return problems


RENDERINGS_WITH_OPTIONS = {
    "chart-auth-ingress": (
        "--set",
        "mlflow.auth.enabled=true,mlflow.auth.existingSecret=a,mlflow.ingress.enabled=true,workspace.create=true",
    ),
}


@pytest.fixture(scope="module")
def all_renderings(rendered) -> dict[str, str]:
    return {**rendered, **{name: helm_template(*args) for name, args in RENDERINGS_WITH_OPTIONS.items()}}


def test_every_rendered_pod_has_a_writable_home(all_renderings):
    users = image_users()
    checked, problems = 0, []
    for name, text in all_renderings.items():
        for template, spec in pod_templates(documents(text)).items():
            checked += 1
            problems += [f"{name} {template}: {p}" for p in home_problems(spec, users)]
    assert not problems, "\n".join(problems)
    assert checked > 40


def test_every_pipeline_step_has_a_writable_home():
    """KFP runs each step in the runtime image as the images' user (kfp-kubernetes security
    context), with a writable root filesystem: HOME is that user's own."""
    pipeline = list(yaml.safe_load_all((REPO / "pipelines" / "invfold_pipeline.yaml").read_text()))
    executors = pipeline[0]["deploymentSpec"]["executors"]
    platform = pipeline[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    users = image_users()
    for name, executor in executors.items():
        context = platform[name]["securityContext"]
        spec = {
            "securityContext": {"runAsUser": int(context["runAsUser"])},
            "containers": [{"name": name, "image": executor["container"]["image"]}],
        }
        assert not home_problems(spec, users), name
    assert len(executors) >= 5


def test_the_check_catches_a_read_only_home():
    users = image_users()
    trainer = {
        "securityContext": {"runAsUser": 10001},
        "containers": [
            {
                "name": "node",
                "image": "r/invfold-deepspeed:1",
                "env": [{"name": "HOME", "value": "/home/invfold"}],
                "securityContext": {"readOnlyRootFilesystem": True},
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    assert home_problems(trainer, users)  # the runtimes before HOME got its emptyDir
    trainer["containers"][0]["volumeMounts"].append({"name": "home", "mountPath": "/home/invfold"})
    trainer["volumes"].append({"name": "home", "emptyDir": {}})
    assert not home_problems(trainer, users)
    stranger = {"securityContext": {"runAsUser": 4242}, "containers": [{"name": "c", "image": "r/invfold-runtime:1"}]}
    assert home_problems(stranger, users)  # a uid the image does not know: HOME is /
