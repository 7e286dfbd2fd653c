"""The CPU variants of the images build here and run real work: the prep step on the bundled
sample, a 2-rank training run per strategy (DDP under torchrun; Horovod and DeepSpeed under
mpirun across two containers that reach each other over sshd on 2222, as Kubeflow Trainer's MPI
runtime does), the MLflow server image, and the compiled pipeline's components through KFP's
DockerRunner with package indexes switched off. Every training container runs without network
access to any registry (--network none, or an internal network): nothing is installed at run time."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.support.deploy_tools import REPO
from tests.support.docker_engine import CPU_IMAGES

pytestmark = [pytest.mark.timeout(2400), pytest.mark.images, pytest.mark.slow]
OFFLINE = ("-e", "PIP_NO_INDEX=1", "-e", "OMP_NUM_THREADS=1")
TRAIN_OPTIONS = (
    "--preset",
    "tiny",
    "--max-steps",
    "4",
    "--tokens-per-batch",
    "800",
    "--validate-every",
    "2",
    "--checkpoint-every",
    "2",
)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder shared with the containers (which run as uid 10001)."""
    folder = tmp_path_factory.mktemp("image-work")
    folder.chmod(0o777)
    return folder


def in_image(
    cpu_images,
    image: str,
    work: Path,
    *command: str,
    network: str = "none",
    name: str | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    # Without a network the container's own hostname does not resolve, and torchrun's rendezvous
    # looks it up: call it localhost.
    args = ["run", "--rm", "--network", network, "-v", f"{work}:/work", *OFFLINE, "--hostname", name or "localhost"]
    if name:
        args += ["--name", name]
    return cpu_images.engine.docker(*args, cpu_images[image], *command, timeout=timeout)


@pytest.fixture(scope="module")
def prepared(cpu_images, work) -> Path:
    """`invfold prep` on the sample data shipped inside the image."""
    in_image(
        cpu_images,
        "runtime",
        work,
        "bash",
        "-c",
        'data=$(python -c "import invfold.data, os; print(os.path.dirname(invfold.data.__file__))") && '
        'invfold prep "$data/sample_chain_set.jsonl.gz" --split-file "$data/sample_chain_set_splits.json" '
        "--out /work/prep",
    )
    return work / "prep"


def test_images_run_as_an_unprivileged_user(cpu_images):
    assert {name: cpu_images.user(name) for name in CPU_IMAGES} == dict.fromkeys(CPU_IMAGES, "10001:10001")


def test_prep_runs_in_the_runtime_image(prepared):
    index = json.loads((prepared / "index.json").read_text())
    assert {"train", "validation", "test"} <= set(index["datasets"])
    assert (prepared / "card.md").stat().st_size > 0


def test_a_failing_step_in_the_runtime_image_leaves_its_reason_as_the_termination_message(cpu_images, work):
    """What the kubelet mounts at /dev/termination-log (a file the container's user may write),
    mounted here the same way: the one-line error is what Argo and KFP then show for the step."""
    log = work / "termination-log"
    log.write_text("")
    log.chmod(0o666)
    proc = cpu_images.engine.docker(
        "run", "--rm", "--network", "none", "-v", f"{log}:/dev/termination-log", cpu_images["runtime"],
        "python", "-c", "from invfold.errors import InputError; "
        "raise InputError('s3://key:hidden@b/set.jsonl', 3, 'seq', 'a sequence', 'nothing')",
        check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" in proc.stderr, proc.stderr[-2000:]
    message = log.read_text()
    assert message.startswith("InputError: ") and "set.jsonl" in message and "\n" not in message, message
    assert "hidden" not in message, message


@pytest.mark.parametrize("image", ["runtime", "mpi", "deepspeed", "ci-cpu"])
def test_every_training_image_has_the_s3_client(cpu_images, image):
    """s3fs is an optional extra of the package: the images must install it (scripts/build_images.sh
    IMAGE_EXTRAS), or every s3:// read dies with fsspec's "Install s3fs to access S3"."""
    proc = cpu_images.engine.docker(
        "run", "--rm", "--network", "none", cpu_images[image], "python", "-c", "import s3fs", check=False
    )
    assert proc.returncode == 0, f"{image}: {proc.stderr[-500:]}"


STORAGE_STEPS_SCRIPT = """
import json, sys
from invfold import storage
from invfold.components.fingerprint.step import fingerprint
from invfold.components.prep.step import prep_step
endpoint, data, splits, out = sys.argv[1:5]
storage.use_endpoint(endpoint)
digest = fingerprint([data, splits])
meta = prep_step(data, splits, digest, "/tmp/prepared", "/tmp/card.md", storage_endpoint=endpoint)
storage.upload_folder("/tmp/prepared", out)
print(json.dumps({"digest": digest, "datasets": meta["datasets"],
                  "index": json.loads(storage.read_bytes(out + "/index.json"))}))
"""


def test_storage_hand_over_runs_inside_the_runtime_image(cpu_images, s3_server):
    """fingerprint and prep read an s3:// protein set from a non-AWS store, and the prepared folder
    is handed over through the store (upload, read back) as the train step and its TrainJob do, all
    inside the runtime image with exactly the environment a step pod gets from the compiled
    pipeline: the storage Secret's keys as env (KFP's `accesskey` / `secretkey` layout) and the
    endpoint as the step's input. moto's server on the host's loopback stands in for KFP's
    SeaweedFS (no S3 server is in the images); the container shares the host's network to reach it."""
    import yaml

    from invfold.data import SAMPLE_CHAIN_SET, SAMPLE_SPLITS

    bucket = s3_server.new_bucket()
    data = s3_server.put(bucket, "cath/chain_set.jsonl.gz", SAMPLE_CHAIN_SET.read_bytes())
    splits = s3_server.put(bucket, "cath/splits.json", SAMPLE_SPLITS.read_bytes())
    _, platform = yaml.safe_load_all((REPO / "pipelines" / "invfold_pipeline.yaml").read_text())
    executor = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-prep-op"]
    kfp_secret = {"accesskey": "testing", "secretkey": "testing"}  # moto accepts any keys
    env = [
        arg
        for s in executor["secretAsEnv"]
        if s["secretNameParameter"]["componentInputParameter"].endswith("storage_secret")
        for k in s["keyToEnv"]
        for arg in ("-e", f"{k['envVar']}={kfp_secret[k['secretKey']]}")
    ]
    assert env, "the compiled prep step gets no storage keys"
    proc = cpu_images.engine.docker(
        "run",
        "--rm",
        "--network",
        "host",
        *OFFLINE,
        *env,
        "-e",
        "AWS_EC2_METADATA_DISABLED=true",
        cpu_images["runtime"],
        "python",
        "-c",
        STORAGE_STEPS_SCRIPT,
        s3_server.endpoint_url,
        data,
        splits,
        f"s3://{bucket}/invfold/prepared",
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["digest"].startswith("sha256:")
    assert {"train", "validation", "test"} <= set(result["index"]["datasets"])
    body = s3_server.client().get_object(Bucket=bucket, Key="invfold/prepared/index.json")["Body"].read()
    assert json.loads(body)["datasets"] == result["index"]["datasets"]


def assert_trained(out: Path) -> None:
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "model.pt").stat().st_size > 0, f"{out}: no model.pt"
    assert summary, f"{out}: empty summary"


def test_ddp_trains_with_two_ranks_under_torchrun(cpu_images, prepared, work):
    in_image(
        cpu_images,
        "runtime",
        work,
        "invfold",
        "train",
        "--data",
        "/work/prep",
        "--out",
        "/work/ddp",
        "--strategy",
        "ddp",
        "--nproc",
        "2",
        *TRAIN_OPTIONS,
    )
    assert_trained(work / "ddp")


@pytest.fixture
def mpi_pair(cpu_images, work):
    """Two containers on an internal network (no route out): `node` runs sshd on 2222 as the
    image user; `launcher` is where mpirun starts. Keys and hostfile as Trainer provides them."""
    engine, tag = cpu_images.engine, uuid.uuid4().hex[:8]
    network, launcher, node = f"invfold-mpi-{tag}", f"launcher-{tag}", f"node-{tag}"
    ssh = work / f"ssh-{tag}"
    ssh.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id_ed25519")], check=True)
    (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
    for path in ssh.iterdir():
        path.chmod(0o644)
    # Trainer's order (node pods first, then the launcher): rank 0 is still the launcher's.
    (work / f"hostfile-{tag}").write_text(f"{node} slots=1\n{launcher} slots=1\n")
    engine.docker("network", "create", "--internal", network)
    mounts = [
        "-v",
        f"{work}:/work",
        "-v",
        f"{ssh}:/home/invfold/.ssh:ro",
        "-v",
        f"{work / f'hostfile-{tag}'}:/etc/mpi/hostfile:ro",
        *OFFLINE,
    ]
    try:
        engine.docker(
            "run",
            "-d",
            "--name",
            node,
            "--hostname",
            node,
            "--network",
            network,
            *mounts,
            cpu_images["ci-cpu"],
            "/usr/local/bin/invfold-sshd",
        )

        def mpirun(*command: str, timeout: float = 600) -> subprocess.CompletedProcess:
            return engine.docker(
                "run",
                "--rm",
                "--name",
                launcher,
                "--hostname",
                launcher,
                "--network",
                network,
                *mounts,
                cpu_images["ci-cpu"],
                "mpirun",
                "-np",
                "2",
                "--bind-to",
                "none",
                "-x",
                "OMP_NUM_THREADS",
                "-x",
                f"MASTER_ADDR={launcher}",
                "-x",
                "MASTER_PORT=29500",
                *command,
                timeout=timeout,
            )

        yield mpirun
    finally:
        engine.docker("rm", "-f", node, launcher, check=False)
        engine.docker("network", "rm", network, check=False)


def test_mpirun_reaches_the_other_container_over_sshd_2222(mpi_pair):
    script = (
        "import os, socket; print(f\"rank={os.environ['OMPI_COMM_WORLD_RANK']}@{socket.gethostname()};\", flush=True)"
    )
    out = mpi_pair("python", "-c", script).stdout
    # mpirun forwards each rank's output in chunks that may interleave: match, do not split lines.
    ranks = dict(re.findall(r"rank=(\d+)@([\w.-]+);", out))
    assert set(ranks) == {"0", "1"} and len(set(ranks.values())) == 2, out


@pytest.mark.parametrize("strategy", ["horovod", "deepspeed"])
def test_mpi_strategy_trains_across_two_containers(cpu_images, prepared, work, mpi_pair, strategy):
    out = f"/work/{strategy}-mpi"
    config = {
        "data": "/work/prep",
        "out": out,
        "strategy": strategy,
        "preset": "tiny",
        "max_steps": 4,
        "tokens_per_batch": 800,
        "validate_every": 2,
        "checkpoint_every": 2,
    }
    in_image(
        cpu_images,
        "ci-cpu",
        work,
        "python",
        "-c",
        "import json, sys; from invfold.components.train.config import TrainConfig; "
        f"TrainConfig(**json.loads(sys.argv[1])).to_json('{out}.json')",
        json.dumps(config),
    )
    mpi_pair("python", "-m", "invfold.components.train.rank_entry", "--config", f"{out}.json", timeout=900)
    assert_trained(work / f"{strategy}-mpi")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_mlflow_image_serves_health_and_artifacts(cpu_images, tmp_path, monkeypatch):
    engine, port, name = cpu_images.engine, _free_port(), f"mlflow-{uuid.uuid4().hex[:8]}"
    engine.docker(
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        "-p",
        f"127.0.0.1:{port}:5000",
        cpu_images["mlflow"],
        "--host",
        "0.0.0.0",
        "--port",
        "5000",
        "--workers",
        "1",
        "--backend-store-uri",
        "sqlite:////tmp/mlflow.db",
        "--serve-artifacts",
        "--artifacts-destination",
        "/tmp/artifacts",
    )
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
        while True:
            try:
                assert urllib.request.urlopen(f"{url}/health", timeout=2).read().strip() == b"OK"
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        "MLflow image: /health did not answer:\n" + engine.docker("logs", name, check=False).stderr
                    )
                time.sleep(1)
        import mlflow

        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        (tmp_path / "note.txt").write_text("through the artifact proxy")
        with mlflow.start_run() as active:
            mlflow.log_metric("loss", 1.5)
            mlflow.log_artifact(str(tmp_path / "note.txt"))
        client = mlflow.MlflowClient(url)
        assert client.get_run(active.info.run_id).data.metrics["loss"] == 1.5
        assert client.get_run(active.info.run_id).info.artifact_uri.startswith("mlflow-artifacts:")
        back = client.download_artifacts(active.info.run_id, "note.txt", str(tmp_path / "back"))
        assert Path(back).read_text() == "through the artifact proxy"
    finally:
        engine.docker("rm", "-f", name, check=False)


def test_mlflow_image_has_what_basic_auth_needs(cpu_images):
    """mlflow.auth.enabled runs `--app-name basic-auth`, which refuses to import without Flask-WTF."""
    proc = cpu_images.engine.docker(
        "run", "--rm", "--entrypoint", "python", cpu_images["mlflow"], "-c", "import flask_wtf, wtforms", check=False
    )
    assert proc.returncode == 0, proc.stderr


SAMPLE_IN_IMAGE = "/opt/venv/lib/python3.11/site-packages/invfold/data"


def test_compiled_pipeline_runs_through_kfp_docker_runner_offline(cpu_images, tmp_path, monkeypatch):
    """`invfold compile` names the built runtime image; KFP's DockerRunner runs every step of that
    compiled pipeline in it, with no network and package indexes off: nothing installs at run time."""
    from kfp import components, local

    compiled = tmp_path / "pipeline.yaml"
    registry, tag = cpu_images["runtime"].rsplit(":", 1)[0].rsplit("/", 1)[0], cpu_images["runtime"].rsplit(":", 1)[1]
    subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "invfold"),
            "compile",
            "--registry",
            registry,
            "--tag",
            tag,
            "--out",
            str(compiled),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"image: {cpu_images['runtime']}" in compiled.read_text()
    root = tmp_path / "root"
    monkeypatch.setenv("DOCKER_HOST", cpu_images.engine.host)
    old_umask = os.umask(0)  # the steps run as uid 10001 and write into folders made here
    try:
        root.mkdir(mode=0o777)
        local.init(
            runner=local.DockerRunner(
                network_mode="none", hostname="localhost", environment={"PIP_NO_INDEX": "1", "OMP_NUM_THREADS": "1"}
            ),
            pipeline_root=str(root),
            raise_on_error=True,
            enable_caching=False,
        )
        pipeline = components.load_component_from_file(str(compiled))
        pipeline(
            data_uri=f"{SAMPLE_IN_IMAGE}/sample_chain_set.jsonl.gz",
            split_file=f"{SAMPLE_IN_IMAGE}/sample_chain_set_splits.json",
            strategy="ddp",
            procs_per_node=2,
            preset="tiny",
            model_overrides={},
            max_steps=4,
            tokens_per_batch=800,
            time_budget_s=60.0,
            mlflow_tracking_uri=f"sqlite:///{root}/mlflow.db",
            checkpoint_root=str(root / "checkpoints"),
        )
    finally:
        os.umask(old_umask)
    # the register step's own output (KFP's local layout: <root>/<pipeline run>/<task>/<output>)
    found = list(root.glob("*/register-op/onnx_model/model.onnx"))
    assert len(found) == 1, sorted(str(p.relative_to(root)) for p in root.rglob("*.onnx"))
    (onnx,) = found
    assert onnx.stat().st_size > 0
    assert json.loads((onnx.parent / "model.parity.json").read_text())["passed"] is True
