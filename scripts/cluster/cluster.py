"""Start or stop the single-node test cluster built by scripts/cluster/build.sh.

    cluster.py up     start whatever is not running (a healthy running cluster is reused)
    cluster.py down   stop every process it started (by pid), unmount, remove its network set-up
    cluster.py purge  down, then remove the run folder (PKI and the images imported into containerd)
    cluster.py env    print the shell lines that point kubectl at it

Every component is a plain process of this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, containerd + kubelet (bridge CNI), kube-proxy, CoreDNS, kube-router's NetworkPolicy
controller (the bridge enforces no policy: kube-router does, with iptables and ipset), and the Kubeflow
Trainer and JobSet controllers (their webhooks served on 127.0.0.1 with certificates of the cluster's own CA).
KFP's object store runs as a pod, as kubeflow/manifests installs it: SeaweedFS in `kubeflow`.
etcd, the controllers and every health port listen on loopback; the API server, the kubelet and
CoreDNS listen on the pod bridge's gateway address (10.244.0.1), which pods reach and nothing outside
this machine does. The run state (PKI, logs, pids, the admin kubeconfig) lies in
$INVFOLD_CACHE_DIR/cluster; the built parts in $INVFOLD_CACHE_DIR/build/cluster (paths from the
environment that scripts/cluster/up.sh sets)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

CACHE = Path(os.environ.get("INVFOLD_CACHE_DIR") or Path.home() / ".cache" / "invfold")
RUN = CACHE / "cluster"
PKI, LOGS, PIDS = RUN / "pki", RUN / "logs", RUN / "pids"
KUBECONFIG = RUN / "admin.kubeconfig"
NODE = "invfold-node"
BRIDGE, GATEWAY, POD_CIDR, SERVICE_CIDR = "invfold0", "10.244.0.1", "10.244.0.0/24", "10.96.0.0/24"
API_PORT = 6443
API = f"https://{GATEWAY}:{API_PORT}"
JOBSET_WEBHOOK_PORT, TRAINER_WEBHOOK_PORT = 9443, 9444
# Started in this order, stopped in the reverse one.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "kube-proxy",
    "coredns",
    "kube-router",
    "jobset",
    "trainer",
)
# kubelet changes these sysctls at start; `down` puts back what was there before `up`.
SYSCTLS = (
    "net/bridge/bridge-nf-call-iptables",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
FORWARD_RULES = (["-i", BRIDGE, "-j", "ACCEPT"], ["-o", BRIDGE, "-j", "ACCEPT"])


def part(name: str) -> Path:
    """A built part's folder, from the environment scripts/cluster/up.sh exports."""
    value = os.environ.get(name)
    if not value:
        sys.exit(f"cluster: {name} is not set: run scripts/cluster/up.sh (make cluster-up), not this file")
    return Path(value)


def log(message: str) -> None:
    print(f"==> {message}", flush=True)


def sh(*cmd: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        sys.exit(f"cluster: `{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def kubectl(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    return sh(os.environ.get("KUBECTL", "kubectl"), f"--kubeconfig={KUBECONFIG}", *args, check=check, input=input)


# --- PKI ---------------------------------------------------------------------------------------


def openssl(*args: str) -> None:
    sh("openssl", *args)


def make_pki() -> None:
    """The cluster's CA and a certificate for every party (kept across restarts of the cluster)."""
    if (PKI / "done").exists():
        return
    log(f"making the cluster's PKI in {PKI}")
    shutil.rmtree(PKI, ignore_errors=True)
    PKI.mkdir(parents=True)
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=invfold-test-ca",
        "-keyout", str(PKI / "ca.key"), "-out", str(PKI / "ca.crt"),
    )  # fmt: skip
    openssl("genrsa", "-out", str(PKI / "sa.key"), "2048")
    openssl("rsa", "-in", str(PKI / "sa.key"), "-pubout", "-out", str(PKI / "sa.pub"))
    api_sans = [
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
        "DNS:localhost",
        "IP:127.0.0.1",
        f"IP:{GATEWAY}",
        "IP:10.96.0.1",
    ]
    certs = {
        # name: (subject, SANs or None for a client certificate)
        "kube-apiserver": ("/CN=kube-apiserver", api_sans),
        "kubelet-serving": (f"/CN={NODE}", [f"DNS:{NODE}", "DNS:localhost", "IP:127.0.0.1", f"IP:{GATEWAY}"]),
        "webhooks": ("/CN=127.0.0.1", ["IP:127.0.0.1", "DNS:localhost"]),
        "admin": ("/O=system:masters/CN=kubernetes-admin", None),
        "apiserver-kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", None),
        "kube-controller-manager": ("/CN=system:kube-controller-manager", None),
        "kube-scheduler": ("/CN=system:kube-scheduler", None),
        "kubelet": (f"/O=system:nodes/CN=system:node:{NODE}", None),
        "kube-proxy": ("/CN=system:kube-proxy", None),
    }
    for name, (subject, sans) in certs.items():
        key, csr, crt, ext = (PKI / f"{name}.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
        openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))
        usage = "serverAuth" if sans else "clientAuth"
        ext.write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={usage}\n" + (f"subjectAltName={','.join(sans)}\n" if sans else "")
        )
        openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(PKI / "ca.crt"), "-CAkey", str(PKI / "ca.key"),
            "-CAcreateserial", "-days", "3650", "-extfile", str(ext), "-out", str(crt),
        )  # fmt: skip
        csr.unlink()
        ext.unlink()
    for name, user in (
        ("admin", "kubernetes-admin"),
        ("kube-controller-manager", "system:kube-controller-manager"),
        ("kube-scheduler", "system:kube-scheduler"),
        ("kubelet", f"system:node:{NODE}"),
        ("kube-proxy", "system:kube-proxy"),
    ):
        write_kubeconfig(PKI / f"{name}.kubeconfig", user, PKI / f"{name}.crt", PKI / f"{name}.key")
    (PKI / "done").touch()


def write_kubeconfig(path: Path, user: str, cert: Path, key: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "invfold-test", "cluster": {"server": API, "certificate-authority": str(PKI / "ca.crt")}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "invfold-test", "context": {"cluster": "invfold-test", "user": user}}],
        "current-context": "invfold-test",
    }
    path.write_text(yaml.safe_dump(config))


# --- processes ---------------------------------------------------------------------------------


def pid_of(name: str) -> int | None:
    path = PIDS / f"{name}.pid"
    if not path.exists():
        return None
    pid = int(path.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    # A recycled pid is not ours: the command line must still be the one we started.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if str(RUN).encode() in cmdline else None


def start(name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
    if pid_of(name):
        return
    LOGS.mkdir(parents=True, exist_ok=True)
    PIDS.mkdir(parents=True, exist_ok=True)
    out = open(LOGS / f"{name}.log", "ab")
    proc = subprocess.Popen(
        cmd,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=RUN,
    )
    (PIDS / f"{name}.pid").write_text(str(proc.pid))
    # Until the child has exec'd, its command line is ours: pid_of would not recognise it yet.
    deadline = time.monotonic() + 10
    while proc.poll() is None and not pid_of(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    log(f"started {name} (pid {proc.pid}, log {LOGS / f'{name}.log'})")


def stop(name: str, timeout: float = 30) -> None:
    pid = pid_of(name)
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_of(name):
            time.sleep(0.2)
        if pid_of(name):
            os.kill(pid, signal.SIGKILL)
        log(f"stopped {name} (pid {pid})")
    for suffix in ("pid", "cmd"):
        (PIDS / f"{name}.{suffix}").unlink(missing_ok=True)


def wait_for(what: str, check, timeout: float, name: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if name and not pid_of(name):
            tail = (LOGS / f"{name}.log").read_text(errors="replace")[-3000:]
            sys.exit(f"cluster: {name} exited while waiting for {what}; its log ends:\n{tail}")
        if time.monotonic() > deadline:
            sys.exit(f"cluster: {what} not reached in {timeout:.0f} s (logs in {LOGS})")
        time.sleep(0.5)


def https_ok(url: str) -> bool:
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    with urllib.request.urlopen(url, context=context, timeout=5) as response:
        return response.status == 200


def insecure_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status == 200


# --- network -----------------------------------------------------------------------------------


def set_sysctl(key: str, value: str) -> None:
    Path("/proc/sys", key).write_text(value)


def setup_network() -> None:
    saved = RUN / "sysctls.json"
    if not saved.exists():
        saved.write_text(json.dumps({k: Path("/proc/sys", k).read_text().strip() for k in SYSCTLS}))
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    set_sysctl("net/bridge/bridge-nf-call-iptables", "1")
    set_sysctl("net/ipv4/ip_forward", "1")
    # dockerd (the image tests' engine) sets FORWARD's policy to DROP: let pod traffic through.
    for rule in FORWARD_RULES:
        if sh("iptables", "-C", "FORWARD", *rule, check=False).returncode != 0:
            sh("iptables", "-I", "FORWARD", "1", *rule)
    cni = RUN / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    conf = {
        "cniVersion": "1.0.0",
        "name": "invfold",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(cni / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    (cni / "net.d" / "10-invfold.conflist").write_text(json.dumps(conf, indent=1))


def teardown_network() -> None:
    # kubelet's own chain (it drops martian packets to 127.0.0.0/8), left behind when it stops.
    for chain in ("INPUT", "OUTPUT"):
        while sh("iptables", "-C", chain, "-j", "KUBE-FIREWALL", check=False).returncode == 0:
            sh("iptables", "-D", chain, "-j", "KUBE-FIREWALL")
    if sh("iptables", "-F", "KUBE-FIREWALL", check=False).returncode == 0:
        sh("iptables", "-X", "KUBE-FIREWALL", check=False)
    for rule in FORWARD_RULES:
        while sh("iptables", "-C", "FORWARD", *rule, check=False).returncode == 0:
            sh("iptables", "-D", "FORWARD", *rule)
    if sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        sh("ip", "link", "delete", BRIDGE)
    saved = RUN / "sysctls.json"
    if saved.exists():
        for key, value in json.loads(saved.read_text()).items():
            try:
                set_sysctl(key, value)
            except OSError:
                pass
        saved.unlink()


# --- components --------------------------------------------------------------------------------


def start_control_plane() -> None:
    debian, k8s = part("CLUSTER_DEBIAN_ROOT"), part("CLUSTER_K8S_BIN")
    start(
        "etcd",
        [
            str(debian / "usr/bin/etcd"),
            "--name=invfold",
            f"--data-dir={RUN / 'etcd'}",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=invfold=http://127.0.0.1:2380",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            "--quota-backend-bytes=2147483648",
            "--logger=zap",
        ],
    )
    wait_for("etcd healthy", lambda: insecure_ok("http://127.0.0.1:2381/health"), 60, "etcd")
    start(
        "kube-apiserver",
        [
            str(k8s / "kube-apiserver"),
            "--etcd-servers=http://127.0.0.1:2379",
            f"--bind-address={GATEWAY}",
            f"--advertise-address={GATEWAY}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={PKI / 'kube-apiserver.crt'}",
            f"--tls-private-key-file={PKI / 'kube-apiserver.key'}",
            f"--client-ca-file={PKI / 'ca.crt'}",
            f"--kubelet-client-certificate={PKI / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={PKI / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={PKI / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-key-file={PKI / 'sa.pub'}",
            f"--service-account-signing-key-file={PKI / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,"
            "ResourceQuota,PodSecurity,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
            "ValidatingAdmissionPolicy,NodeRestriction",
            "--enable-aggregator-routing=true",
            "--allow-privileged=true",
            "--profiling=false",
            # Debian's etcd (3.4) has no watch progress requests, so with WatchList on (beta, the
            # default since 1.34) every watch without a resourceVersion ends at once with an error
            # and its client relists on a back-off of up to 30 s: Argo saw step pods that late.
            "--feature-gates=WatchList=false",
        ],
    )
    wait_for("the API server ready", lambda: https_ok(f"{API}/readyz"), 120, "kube-apiserver")
    start(
        "kube-controller-manager",
        [
            str(k8s / "kube-controller-manager"),
            f"--kubeconfig={PKI / 'kube-controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={PKI / 'kube-controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={PKI / 'kube-controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--service-account-private-key-file={PKI / 'sa.key'}",
            f"--root-ca-file={PKI / 'ca.crt'}",
            f"--cluster-signing-cert-file={PKI / 'ca.crt'}",
            f"--cluster-signing-key-file={PKI / 'ca.key'}",
            "--use-service-account-credentials=true",
            "--controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--leader-elect=false",
        ],
    )
    start(
        "kube-scheduler",
        [
            str(k8s / "kube-scheduler"),
            f"--kubeconfig={PKI / 'kube-scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={PKI / 'kube-scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={PKI / 'kube-scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ],
    )


def start_containerd() -> str:
    """containerd with its CRI plugin, the sandbox image imported; returns its socket."""
    debian = part("CLUSTER_DEBIAN_ROOT")
    containerd_dir = RUN / "containerd"
    socket = containerd_dir / "containerd.sock"
    containerd_dir.mkdir(parents=True, exist_ok=True)
    config = f"""version = 2
root = "{containerd_dir / "root"}"
state = "{containerd_dir / "state"}"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{containerd_dir / "ttrpc.sock"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "invfold.test/pause:1"
  # This machine lacks CAP_SYS_RESOURCE: without this every sandbox fails in runc create.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{debian / "usr/sbin/runc"}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{debian / "usr/lib/cni"}"
    conf_dir = "{RUN / "cni" / "net.d"}"
"""
    (containerd_dir / "config.toml").write_text(config)
    path = f"{debian / 'usr/bin'}:{debian / 'usr/sbin'}:{os.environ['PATH']}"
    running, log_file = pid_of("containerd"), LOGS / "containerd.log"
    offset = log_file.stat().st_size if log_file.exists() else 0
    start(
        "containerd",
        [str(debian / "usr/bin/containerd"), "--config", str(containerd_dir / "config.toml")],
        env={"PATH": path},
    )
    wait_for("containerd's socket", socket.exists, 60, "containerd")
    if not running:
        # The socket answers before the CRI plugin has recovered its state, and a kubelet started
        # then exits ("server is not initialized yet"); the plugin logs this line just before it serves.
        ready = b"Start streaming server"
        wait_for("containerd's CRI plugin", lambda: ready in log_file.read_bytes()[offset:], 60, "containerd")
    pause = part("CLUSTER_PAUSE_TAR")
    ctr = [str(debian / "usr/bin/ctr"), "--address", str(socket), "-n", "k8s.io"]
    if "invfold.test/pause:1" not in sh(*ctr, "images", "ls", "-q").stdout.split():
        sh(*ctr, "images", "import", str(pause))
    return str(socket)


def start_node() -> None:
    debian, k8s = part("CLUSTER_DEBIAN_ROOT"), part("CLUSTER_K8S_BIN")
    socket = start_containerd()
    path = f"{debian / 'usr/bin'}:{debian / 'usr/sbin'}:{os.environ['PATH']}"
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": GATEWAY,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(PKI / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(PKI / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(PKI / "kubelet-serving.key"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [GATEWAY],
        "containerRuntimeEndpoint": f"unix://{socket}",
        # This machine runs cgroup v1, has no systemd, and swap may be on.
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(RUN / "pod-logs"),
        # The disk is shared with the image builds and CI's clones: no disk-based eviction and no image
        # collection (as kind's nodes). Under disk pressure the kubelet collects every image no running
        # pod uses, the sandbox image included, and nothing can be pulled back here: a CI run that
        # crossed 1 GiB free lost invfold.test/pause:1 and every later pod stayed in ContainerCreating.
        # tests/cluster's node_images checks the free space before an import instead.
        "evictionHard": {
            "memory.available": "200Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
            "imagefs.inodesFree": "0%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "podPidsLimit": -1,
        "staticPodPath": "",
    }
    (RUN / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config))
    start(
        "kubelet",
        [
            str(k8s / "kubelet"),
            f"--config={RUN / 'kubelet.yaml'}",
            f"--kubeconfig={PKI / 'kubelet.kubeconfig'}",
            f"--root-dir={RUN / 'kubelet'}",
            f"--hostname-override={NODE}",
            f"--node-ip={GATEWAY}",
        ],
        env={"PATH": path},
    )
    proxy_config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(PKI / "kube-proxy.kubeconfig")},
        "hostnameOverride": NODE,
        "clusterCIDR": POD_CIDR,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # Leave the machine's conntrack table size alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "nodePortAddresses": [f"{GATEWAY}/32"],
    }
    (RUN / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy_config))
    start("kube-proxy", [str(k8s / "kube-proxy"), f"--config={RUN / 'kube-proxy.yaml'}"], env={"PATH": path})
    corefile = f""".:53 {{
    bind {GATEWAY}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {KUBECONFIG}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""
    (RUN / "Corefile").write_text(corefile)
    start("coredns", [str(part("CLUSTER_COREDNS_BIN") / "coredns"), "-conf", str(RUN / "Corefile")])


# What kube-router's policy controller makes (its own constants, pkg/controllers/netpol): chains
# jumped to from INPUT, FORWARD and OUTPUT, one chain per policy and per isolated pod, ipsets of peers.
KUBE_ROUTER_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
KUBE_ROUTER_IPSETS = ("KUBE-SRC-", "KUBE-DST-")


def debian_env() -> dict[str, str]:
    """PATH and library path of the Debian parts (ipset and its libipset)."""
    debian = part("CLUSTER_DEBIAN_ROOT")
    return {
        "PATH": f"{debian / 'usr/bin'}:{debian / 'usr/sbin'}:{os.environ['PATH']}",
        "LD_LIBRARY_PATH": str(debian / "usr/lib/x86_64-linux-gnu"),
    }


def start_policy_enforcer() -> None:
    """kube-router with only its firewall (no BGP routing, no service proxy: the bridge and
    kube-proxy keep those), ready once its first sync of every policy into iptables has finished."""
    log_file = LOGS / "kube-router.log"
    seen = log_file.stat().st_size if log_file.exists() else 0
    start(
        "kube-router",
        [
            str(part("CLUSTER_KUBE_ROUTER_BIN") / "kube-router"),
            f"--kubeconfig={KUBECONFIG}",
            f"--hostname-override={NODE}",
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--enable-cni=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Its health port would listen on every address; readiness is read from its log instead.
            "--health-port=0",
            "--v=1",
        ],
        env=debian_env(),
    )

    def synced() -> bool:
        with open(log_file, "rb") as f:
            f.seek(seen)
            return b"sync iptables took" in f.read()

    wait_for("kube-router's first policy sync", synced, 120, "kube-router")


def remove_policy_state() -> None:
    """kube-router's chains and ipsets. Its own `--cleanup-config` (v2.1.0) reports the policy
    controller cleaned without touching anything (it runs on an empty controller) and then
    crashes in the service proxy's cleanup, so this removes what the constants above name."""
    rules = sh("iptables", "-S", check=False).stdout.splitlines()
    for rule in rules:
        words = shlex.split(rule)
        if words[:1] == ["-A"] and words[1] in ("INPUT", "FORWARD", "OUTPUT") and "-j" in words:
            if words[words.index("-j") + 1].startswith(KUBE_ROUTER_CHAINS):
                sh("iptables", "-D", *words[1:], check=False)
    chains = [w[1] for w in map(str.split, rules) if w[:1] == ["-N"] and w[1].startswith(KUBE_ROUTER_CHAINS)]
    for chain in chains:
        sh("iptables", "-F", chain, check=False)
    for chain in chains:
        sh("iptables", "-X", chain, check=False)
    ipset = part("CLUSTER_DEBIAN_ROOT") / "usr/sbin/ipset"
    if ipset.exists():
        env = {**os.environ, **debian_env()}
        for name in sh(str(ipset), "list", "-n", check=False, env=env).stdout.split():
            if name.startswith(KUBE_ROUTER_IPSETS):
                sh(str(ipset), "destroy", name, check=False, env=env)


def node_ready() -> bool:
    out = kubectl("get", "node", NODE, "-o", "json", check=False)
    if out.returncode != 0:
        return False
    conditions = json.loads(out.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 add/replace (all the upstream webhook patches use)."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = doc
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op["op"] == "add":
                target.insert(index, op["value"])
            else:
                target[index] = op["value"]
        else:
            target[last] = op["value"]
    return doc


def webhook_configurations(folder: Path, prefix: str, port: int) -> list[dict]:
    """The controller's own webhook configurations (upstream manifests + patches), pointed at
    https://127.0.0.1:<port> with the cluster CA instead of an in-cluster Service."""
    ca = base64.b64encode((PKI / "ca.crt").read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all((folder / "manifests.yaml").read_text()):
        if not doc:
            continue
        kind = doc["kind"]
        patch = folder / ("patch-mutating.yaml" if kind.startswith("Mutating") else "patch-validating.yaml")
        doc = json_patch(doc, yaml.safe_load(patch.read_text()))
        doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
        out.append(doc)
    return out


def start_kubeflow() -> None:
    jobset, trainer = part("CLUSTER_JOBSET_DIR"), part("CLUSTER_TRAINER_DIR")
    for folder in (jobset / "crds", trainer / "crds"):
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(folder))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    certs = RUN / "webhook-certs"
    certs.mkdir(exist_ok=True)
    shutil.copy(PKI / "webhooks.crt", certs / "tls.crt")
    shutil.copy(PKI / "webhooks.key", certs / "tls.key")
    (RUN / "jobset.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {"port": JOBSET_WEBHOOK_PORT, "host": "127.0.0.1", "certDir": str(certs)},
                "metrics": {"bindAddress": "127.0.0.1:8443"},
                "health": {"healthProbeBindAddress": "127.0.0.1:8081"},
            }
        )
    )
    (RUN / "trainer.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "certManagement": {"enable": False},
                "webhook": {"port": TRAINER_WEBHOOK_PORT, "host": "127.0.0.1"},
                "metrics": {"bindAddress": "127.0.0.1:8444", "secureServing": False},
                "health": {
                    "healthProbeBindAddress": "127.0.0.1:8082",
                    "readinessEndpointName": "readyz",
                    "livenessEndpointName": "healthz",
                },
            }
        )
    )
    env = {"KUBECONFIG": str(KUBECONFIG)}
    start("jobset", [str(jobset / "bin" / "jobset"), f"--config={RUN / 'jobset.yaml'}"], env=env)
    # Trainer reads its serving certificate from controller-runtime's default folder under TMPDIR.
    trainer_tmp = RUN / "trainer-tmp"
    (trainer_tmp / "k8s-webhook-server").mkdir(parents=True, exist_ok=True)
    serving = trainer_tmp / "k8s-webhook-server" / "serving-certs"
    if not serving.exists():
        serving.symlink_to(certs)
    start(
        "trainer",
        [str(trainer / "bin" / "trainer-controller-manager"), f"--config={RUN / 'trainer.yaml'}"],
        env={**env, "TMPDIR": str(trainer_tmp)},
    )
    wait_for("JobSet ready", lambda: insecure_ok("http://127.0.0.1:8081/readyz"), 120, "jobset")
    wait_for("Trainer ready", lambda: insecure_ok("http://127.0.0.1:8082/readyz"), 120, "trainer")
    hooks = webhook_configurations(jobset / "webhook", "jobset", JOBSET_WEBHOOK_PORT)
    hooks += webhook_configurations(trainer / "webhook", "trainer", TRAINER_WEBHOOK_PORT)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(hooks))


# --- KFP's object store ------------------------------------------------------------------------

STORE_NAMESPACE = "kubeflow"
STORE_BUCKETS = ("mlpipeline",)  # the only bucket KFP's store init creates (no other: installs have none)


def store_keys() -> dict[str, str]:
    """The store's admin keys: made once per cluster run folder, never printed."""
    path = RUN / "object-store-keys.json"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(json.dumps({"accesskey": secrets.token_hex(10), "secretkey": secrets.token_urlsafe(30)}))
    return json.loads(path.read_text())


def store_manifests(image: str, keys: dict[str, str]) -> list[dict]:
    """What kubeflow/manifests' KFP 2.16+ installs for its store (pipelines
    manifests/kustomize/third-party/seaweedfs): Deployment `seaweedfs` (label app=seaweedfs,
    `weed server -s3 -iam`), its Service, and the admin keys in Secret `mlpipeline-minio-artifact`
    (keys `accesskey`/`secretkey`). Differences: the keys reach weed as an -s3.config file instead of
    an init Job's `weed shell` (this image has no shell), the data lies in an emptyDir, and the
    Service also serves S3 on 8333 beside 9000."""
    labels = {"app": "seaweedfs"}
    identity = {
        "identities": [
            {
                "name": "kubeflow-admin",
                "credentials": [{"accessKey": keys["accesskey"], "secretKey": keys["secretkey"]}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    meta = {"namespace": STORE_NAMESPACE}
    restricted = {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 65535,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STORE_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mlpipeline-minio-artifact", **meta},
            "stringData": keys,
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "seaweedfs-s3-config", **meta},
            "stringData": {"s3.json": json.dumps(identity)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "seaweedfs", "labels": labels, **meta},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": {**labels, "application-crd-id": "kubeflow-pipelines"}},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "seaweedfs",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": [
                                    "server",
                                    "-dir=/data",
                                    "-s3",
                                    "-iam",
                                    "-s3.config=/etc/seaweedfs/s3.json",
                                    # Each bucket grows 7 volumes at its first write; the default
                                    # 8 volume slots leave the second bucket none.
                                    "-master.volumeSizeLimitMB=256",
                                    "-volume.max=64",
                                ],
                                "ports": [{"containerPort": p} for p in (8333, 8111, 9333, 19333, 8888, 18888)],
                                "readinessProbe": {"httpGet": {"path": "/status", "port": 8333}, "periodSeconds": 2},
                                "securityContext": restricted,
                                "resources": {"requests": {"cpu": "20m", "memory": "100Mi"}},
                                "volumeMounts": [
                                    {"name": "data", "mountPath": "/data"},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                    {"name": "config", "mountPath": "/etc/seaweedfs", "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "data", "emptyDir": {}},
                            {"name": "tmp", "emptyDir": {}},
                            {"name": "config", "secret": {"secretName": "seaweedfs-s3-config"}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "seaweedfs", **meta},
            "spec": {
                "selector": labels,
                "ports": [
                    {"name": "http-s3", "port": 8333, "targetPort": 8333},
                    {"name": "http", "port": 9000, "targetPort": 8333},
                    {"name": "http-iam", "port": 8111, "targetPort": 8111},
                    {"name": "http-master", "port": 9333, "targetPort": 9333},
                    {"name": "grpc-master", "port": 19333, "targetPort": 19333},
                    {"name": "http-filer", "port": 8888, "targetPort": 8888},
                    {"name": "grpc-filer", "port": 18888, "targetPort": 18888},
                ],
            },
        },
    ]


def start_object_store() -> None:
    """SeaweedFS in `kubeflow` with KFP's bucket alone, reachable in-cluster at
    http://seaweedfs.kubeflow:8333 (and :9000); applying it again changes nothing."""
    folder, image = part("CLUSTER_SEAWEEDFS_DIR"), os.environ["CLUSTER_SEAWEEDFS_IMAGE"]
    debian = part("CLUSTER_DEBIAN_ROOT")
    ctr = [str(debian / "usr/bin/ctr"), "--address", str(RUN / "containerd" / "containerd.sock"), "-n", "k8s.io"]
    if image not in sh(*ctr, "images", "ls", "-q").stdout.split():
        sh(*ctr, "images", "import", str(folder / "seaweedfs.tar"))
    docs = store_manifests(image, store_keys())
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))
    kubectl("-n", STORE_NAMESPACE, "rollout", "status", "deployment/seaweedfs", "--timeout=180s")
    pod_ip = kubectl(
        "-n", STORE_NAMESPACE, "get", "pods", "-l", "app=seaweedfs", "-o", "jsonpath={.items[0].status.podIP}"
    ).stdout.strip()
    # Buckets through weed's own admin shell, as KFP's init Job does (from here: the pod has no shell).
    weed = [str(folder / "bin" / "weed"), "shell", f"-master={pod_ip}:9333"]
    listed = {
        line.split()[0] for line in sh(*weed, input="s3.bucket.list\n", timeout=120).stdout.splitlines() if line.strip()
    }
    missing = [bucket for bucket in STORE_BUCKETS if bucket not in listed]
    if missing:
        sh(*weed, input="".join(f"s3.bucket.create -name {bucket}\n" for bucket in missing), timeout=120)
    log(f"object store up: http://seaweedfs.{STORE_NAMESPACE}:8333, buckets {', '.join(STORE_BUCKETS)}")


# --- Kubeflow Pipelines ------------------------------------------------------------------------

KFP_NAMESPACE = "kubeflow"
# KFP's own manifests, as upstream documents a standalone install: the cluster-scoped resources, then
# the default variant (API server, persistence agent, Argo's controller, ML Metadata, SeaweedFS, and
# MySQL, served here by Debian's MariaDB). Not the PostgreSQL variant: 2.17.0's API server queries
# its default experiment with unquoted CamelCase columns (storage/default_experiment_store.go), which
# PostgreSQL folds to lower case, and stops at `column "defaultexperimentid" does not exist`.
KFP_CLUSTER_SCOPED = "cluster-scoped-resources"
KFP_ENV = "env/platform-agnostic"
# What a cluster without a registry and with two cores changes, through kustomize alone: the
# images (built here, on the node), ML Metadata's gRPC-web side served by a Go proxy where upstream
# runs Envoy, and no replicas for the parts neither a submitted run nor the UI uses (the v1 cache
# webhook and its deployer, the v1 metadata writer, recurring runs, the viewer and visualization
# servers).
KFP_IDLE = (
    "cache-deployer-deployment",
    "cache-server",
    "metadata-writer",
    "ml-pipeline-scheduledworkflow",
    "ml-pipeline-viewer-crd",
    "ml-pipeline-visualizationserver",
)
KFP_SERVING = (
    "mysql",
    "seaweedfs",
    "metadata-grpc-deployment",
    "ml-pipeline",
    "ml-pipeline-persistenceagent",
    "workflow-controller",
    "metadata-envoy-deployment",
    "ml-pipeline-ui",
)
# In metadata-envoy-deployment, improbable-eng's grpcwebproxy in Envoy's place: the same port (9090,
# where metadata-envoy-service and the UI's server send gRPC-web), the same backend as upstream's
# envoy-config.yaml (metadata-grpc-service:8080, plain HTTP/2), any origin (Envoy's CORS policy
# allows `*`), and no deadline on a call (Envoy's grpc_timeout_header_max: 0s).
ENVOY_ARGS = ["/etc/envoy/envoy-config.yaml"]
GRPCWEBPROXY_ARGS = [
    "--backend_addr=metadata-grpc-service:8080",
    "--run_tls_server=false",
    "--server_http_debug_port=9090",
    "--allow_all_origins",
    "--backend_max_call_recv_msg_size=67108864",
    "--server_http_max_write_timeout=0s",
    "--server_http_max_read_timeout=0s",
]
# Claims of KFP's manifests, each bound to a folder of this machine (no storage provisioner runs here).
KFP_CLAIMS = {"mysql-pv-claim": "20Gi", "seaweedfs-pvc": "20Gi"}
# The arguments of upstream's `mysql` Deployment (MySQL 8.4's) and what MariaDB takes for them: its
# native password plugin is its default, and it knows no --authentication-policy.
MYSQL_ARGS = [
    "--datadir",
    "/var/lib/mysql",
    "--authentication-policy=mysql_native_password",
    "--mysql-native-password=ON",
    "--disable-log-bin",
]
MARIADB_ARGS = ["--datadir", "/var/lib/mysql", "--skip-log-bin"]
VOLUMES = RUN / "volumes"
# KFP 2.17's MLflow plugin (backend/src/apiserver/plugins/mlflow), configured only in the API
# server's config.json. Upstream's turns it on for an OpenDataHub MLflow over TLS with workspaces,
# which no cluster here has: every run would end with its plugin state PLUGIN_FAILED. Here it
# points at the MLflow of the chart's release in `kubeflow` (the lane's; docs/deploy.md says how
# to do the same): each KFP run gets a parent run in experiment `invfold` and each step a nested
# run, which invfold's steps record into (MLFLOW_RUN_ID, injected). Basic-auth with the steps'
# account, which KFP reads from the Secret `kfp-mlflow-credentials` (a fixed name) of the run's
# namespace; workspaces off (a stock MLflow answers 500 to their header).
KFP_MLFLOW_PLUGIN = {
    "endpoint": "http://invfold-mlflow.kubeflow.svc.cluster.local:5000",
    "timeout": "30s",
    "settings": {
        "authType": "basic-auth",
        "workspacesEnabled": False,
        "credentialSecretRef": {"usernameKey": "MLFLOW_TRACKING_USERNAME", "passwordKey": "MLFLOW_TRACKING_PASSWORD"},
        "defaultExperimentName": "invfold",
        "injectUserEnvVars": True,
    },
}
KFP_SERVER_CONFIG = "ml-pipeline-config"  # the ConfigMap with that config.json, mounted over the image's


def kfp_images() -> dict[str, tuple[str, str]]:
    """The last part of an upstream image's name -> (our image, tag), as scripts/cluster/build.sh
    tags them: `.../kfp-api-server:2.17.0` -> invfold.test/kfp-api-server:2.17.0."""
    prefix, kfp, argo = os.environ["KFP_IMAGE_PREFIX"], os.environ["KFP_VERSION"], os.environ["ARGO_VERSION"]
    return {
        "kfp-api-server": (f"{prefix}/kfp-api-server", kfp),
        "kfp-persistence-agent": (f"{prefix}/kfp-persistence-agent", kfp),
        "workflow-controller": (f"{prefix}/argo-workflow-controller", argo),
        "ml_metadata_store_server": (f"{prefix}/ml-metadata-server", os.environ["MLMD_VERSION"]),
        "kfp-frontend": (f"{prefix}/kfp-frontend", kfp),
        "kfp-metadata-envoy": (f"{prefix}/grpcwebproxy", os.environ["GRPCWEBPROXY_VERSION"]),
        "mysql": (f"{prefix}/mariadb", "10.11"),
        "alpine": (f"{prefix}/waiter", "1"),
        "seaweedfs": (f"{prefix}/kfp-seaweedfs", os.environ["SEAWEEDFS_VERSION"].rsplit("-", 1)[-1]),
    }


def pod_images(doc: dict | None) -> list[str]:
    """The images of a rendered object's pod template (init containers too); none for other kinds."""
    pod = (((doc or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    return [c["image"] for c in pod.get("initContainers", []) + pod.get("containers", [])]


def upstream_images(rendered: str) -> set[str]:
    """The image names (without tags) of upstream's rendered manifests."""
    return {image.split("@")[0].rsplit(":", 1)[0] for doc in yaml.safe_load_all(rendered) for image in pod_images(doc)}


def kfp_overlay(rendered: str) -> dict:
    """The kustomization that installs KFP: upstream's variant plus the changes named above (each
    of our images replaces the upstream image of the same last name in `rendered`, upstream's
    manifests as kustomize renders them), the driver and launcher images the API server writes into
    runs, Argo's executor image (a flag), and MariaDB's arguments for MySQL's."""
    prefix, kfp, argo = os.environ["KFP_IMAGE_PREFIX"], os.environ["KFP_VERSION"], os.environ["ARGO_VERSION"]
    ours = kfp_images()
    images = []
    for name in sorted(upstream_images(rendered)):
        if (built := ours.get(name.rsplit("/", 1)[-1])) is not None:
            images.append({"name": name, "newName": built[0], "newTag": built[1]})
    run_images = {
        "V2_DRIVER_IMAGE": f"{prefix}/kfp-driver:{kfp}",
        "V2_LAUNCHER_IMAGE": f"{prefix}/kfp-launcher-v2:{kfp}",
    }
    server = {
        "name": "ml-pipeline-api-server",
        "env": [{"name": k, "value": v} for k, v in run_images.items()],
        "volumeMounts": [{"name": "config", "mountPath": "/config/config.json", "subPath": "config.json"}],
    }
    config = {"name": "config", "configMap": {"name": KFP_SERVER_CONFIG}}
    server_patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ml-pipeline"},
        "spec": {"template": {"spec": {"containers": [server], "volumes": [config]}}},
    }
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize takes bases by relative path only.
        "resources": [os.path.relpath(part("CLUSTER_KFP_DIR") / "manifests" / KFP_ENV, RUN / "kfp")],
        "images": images,
        "configMapGenerator": [{"name": KFP_SERVER_CONFIG, "namespace": KFP_NAMESPACE, "files": ["config.json"]}],
        "replicas": [{"name": name, "count": 0} for name in KFP_IDLE],
        "patches": [
            # a strategic merge: the entries of the same name are replaced in place
            {"target": {"kind": "Deployment", "name": "ml-pipeline"}, "patch": yaml.safe_dump(server_patch)},
            {
                "target": {"kind": "Deployment", "name": "mysql"},
                "patch": json.dumps(
                    [
                        {"op": "test", "path": "/spec/template/spec/containers/0/args", "value": MYSQL_ARGS},
                        {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": MARIADB_ARGS},
                    ]
                ),
            },
            {
                "target": {"kind": "Deployment", "name": "metadata-envoy-deployment"},
                "patch": json.dumps(
                    [
                        {"op": "test", "path": "/spec/template/spec/containers/0/args", "value": ENVOY_ARGS},
                        {"op": "add", "path": "/spec/template/spec/containers/0/command", "value": ["grpcwebproxy"]},
                        {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": GRPCWEBPROXY_ARGS},
                    ]
                ),
            },
            {
                "target": {"kind": "Deployment", "name": "workflow-controller"},
                "patch": json.dumps(
                    [
                        {"op": "test", "path": "/spec/template/spec/containers/0/args/2", "value": "--executor-image"},
                        {
                            "op": "replace",
                            "path": "/spec/template/spec/containers/0/args/3",
                            "value": f"{prefix}/argo-argoexec:{argo}",
                        },
                    ]
                ),
            },
        ],
    }


def kfp_server_config() -> dict:
    """Upstream's config.json for the API server (its source tree's), with our MLflow plugin."""
    path = part("CLUSTER_KFP_DIR") / "src" / "backend" / "src" / "apiserver" / "config" / "config.json"
    config = json.loads(path.read_text())
    config.setdefault("plugins", {})["mlflow"] = KFP_MLFLOW_PLUGIN
    return config


def not_built_here(rendered: str) -> list[str]:
    """The images of `rendered`'s Deployments with replicas that are not ours."""
    prefix, foreign = os.environ["KFP_IMAGE_PREFIX"] + "/", set()
    for doc in yaml.safe_load_all(rendered):
        if (doc or {}).get("kind") == "Deployment" and doc["spec"].get("replicas", 1) != 0:
            foreign |= {image for image in pod_images(doc) if not image.startswith(prefix)}
    return sorted(foreign)


def kfp_volumes() -> list[dict]:
    """A PersistentVolume per claim of KFP's manifests, bound to it, on a folder of the run state
    (world-writable: a hostPath volume ignores the pods' fsGroup)."""
    volumes = []
    for claim, size in KFP_CLAIMS.items():
        folder = VOLUMES / claim
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o777)
        volumes.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"kfp-{claim}"},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "claimRef": {"namespace": KFP_NAMESPACE, "name": claim},
                    "hostPath": {"path": str(folder), "type": "Directory"},
                },
            }
        )
    return volumes


def node_ctr() -> list[str]:
    debian = part("CLUSTER_DEBIAN_ROOT")
    return [str(debian / "usr/bin/ctr"), "--address", str(RUN / "containerd" / "containerd.sock"), "-n", "k8s.io"]


def start_pipelines() -> None:
    """KFP from upstream's manifests, its images imported into the node first; applying it again
    changes nothing. The API server answers at http://ml-pipeline.kubeflow:8888 in the cluster."""
    started = time.monotonic()
    # A generation of the images is imported once (their tags stay when their content changes).
    images, stamp = part("CLUSTER_KFP_IMAGES_DIR"), RUN / "containerd" / "kfp-images"
    if not stamp.exists() or stamp.read_text() != images.name:
        for archive in sorted(images.glob("*.tar")):
            sh(*node_ctr(), "images", "import", str(archive))
        stamp.write_text(images.name)
    manifests = part("CLUSTER_KFP_DIR") / "manifests"
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(manifests / KFP_CLUSTER_SCOPED))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(kfp_volumes()))
    overlay = RUN / "kfp"
    overlay.mkdir(exist_ok=True)
    rendered = kubectl("kustomize", str(manifests / KFP_ENV)).stdout
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kfp_overlay(rendered), sort_keys=False))
    (overlay / "config.json").write_text(json.dumps(kfp_server_config(), indent=2))
    foreign = not_built_here(kubectl("kustomize", str(overlay)).stdout)
    if foreign:
        sys.exit(f"cluster: KFP's manifests run images no part builds (nothing can be pulled here): {foreign}")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    for name in KFP_SERVING:
        kubectl("-n", KFP_NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=600s")
    log(f"Kubeflow Pipelines up in {time.monotonic() - started:.0f} s: http://ml-pipeline.{KFP_NAMESPACE}:8888")


def installed_store() -> str | None:
    """Which store the running cluster holds: "kfp" (KFP's manifests label their selector with
    application-crd-id), "lane" (ours), or None (none yet)."""
    proc = kubectl(
        "-n",
        STORE_NAMESPACE,
        "get",
        "deployment",
        "seaweedfs",
        "-o",
        "jsonpath={.spec.selector.matchLabels}",
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return "kfp" if "application-crd-id" in json.loads(proc.stdout) else "lane"


def start_store() -> None:
    """All of KFP from its own manifests, SeaweedFS included (docs/cluster-contract.md, "KFP's
    backend on the test cluster"), or with INVFOLD_CLUSTER_KFP=0 KFP's store alone. Both name
    their store `seaweedfs`, with different selectors (immutable): a running cluster keeps the one
    it has, and the other is refused with what to do, not replaced (its objects would go)."""
    wanted = "lane" if os.environ.get("INVFOLD_CLUSTER_KFP") == "0" else "kfp"
    held = installed_store()
    if held not in (None, wanted):
        described = {"kfp": "Kubeflow Pipelines", "lane": "the object store alone (INVFOLD_CLUSTER_KFP=0)"}
        sys.exit(
            f"cluster: the running cluster holds {described[held]}, and {described[wanted]} was asked for: "
            "stop it first (`make cluster-down`; its objects go with it), then start it again"
        )
    if wanted == "kfp":
        start_pipelines()
    else:
        start_object_store()


def healthy() -> bool:
    if not all(pid_of(name) for name in COMPONENTS) or not KUBECONFIG.exists():
        return False
    try:
        return https_ok(f"{API}/readyz") and node_ready()
    except Exception:  # noqa: BLE001
        return False


def up() -> None:
    started = time.monotonic()
    RUN.mkdir(parents=True, exist_ok=True)
    if healthy():
        start_store()
        log(f"the cluster is already running: export KUBECONFIG={KUBECONFIG}")
        return
    if any(pid_of(name) for name in COMPONENTS):
        log("part of the cluster is running: stopping it first")
        down()
    elif (RUN / "etcd").exists():
        # Its processes ended without `down` (a machine stopped under it): its objects would come
        # back with the control plane, whichever store they hold.
        log("the state of a cluster that was never stopped is left: removing it first")
        down()
    make_pki()
    shutil.copy(PKI / "admin.kubeconfig", KUBECONFIG)
    setup_network()
    start_control_plane()
    start_node()
    wait_for(f"node {NODE} Ready", node_ready, 180, "kubelet")
    start_policy_enforcer()
    start_kubeflow()
    start_store()
    log(f"cluster up in {time.monotonic() - started:.0f} s: export KUBECONFIG={KUBECONFIG}")


CGROUPS = Path("/sys/fs/cgroup")


def mounts_under(root: Path) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(f"{root}/"):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def remove_pods() -> None:
    """Kill every container of our containerd (its tasks), so no pod outlives the cluster."""
    debian = os.environ.get("CLUSTER_DEBIAN_ROOT")
    socket = RUN / "containerd" / "containerd.sock"
    if not (debian and pid_of("containerd") and socket.exists()):
        return
    ctr = [str(Path(debian) / "usr/bin/ctr"), "--address", str(socket), "-n", "k8s.io"]
    tasks = sh(*ctr, "tasks", "ls", "-q", check=False).stdout.split()
    for task in tasks:
        sh(*ctr, "tasks", "kill", "-a", "-s", "SIGKILL", task, check=False)
    for task in tasks:
        for _ in range(50):
            if sh(*ctr, "tasks", "delete", task, check=False).returncode == 0:
                break
            time.sleep(0.1)
    for container in sh(*ctr, "containers", "ls", "-q", check=False).stdout.split():
        sh(*ctr, "containers", "delete", container, check=False)


def kill_leftover_containers() -> None:
    """What outlives our containerd, unknown to the next one: its shims (they outlive it by
    design) and, when it was killed without `down`, the pods' processes in the kubelet's cgroups."""
    pids = set()
    for hierarchy in (CGROUPS, *CGROUPS.iterdir()):
        for procs in hierarchy.glob("kubepods/**/cgroup.procs"):
            pids |= {int(pid) for pid in procs.read_text().split()}
    socket = str(RUN / "containerd" / "containerd.sock").encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and socket in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
        except OSError:
            continue
    for pid in pids - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if pids:
        log(f"killed {len(pids)} processes our containerd left (shims, containers)")


def remove_cgroups() -> None:
    """kubelet's cgroups (kubepods) in every v1 hierarchy, deepest first."""
    for hierarchy in CGROUPS.iterdir():
        top = hierarchy / "kubepods"
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass


def down() -> None:
    stop("kubelet")
    remove_pods()
    for name in reversed(COMPONENTS):
        stop(name)
    kill_leftover_containers()
    k8s = os.environ.get("CLUSTER_K8S_BIN")
    if k8s and Path(k8s, "kube-proxy").exists():
        sh(str(Path(k8s, "kube-proxy")), "--cleanup", check=False)  # its iptables chains
    remove_policy_state()
    for point in mounts_under(RUN):
        if sh("umount", point, check=False).returncode != 0:
            sh("umount", "-l", point, check=False)
    remove_cgroups()
    teardown_network()
    # The cluster's state goes. The PKI stays for the next `up`, and so do the images imported into
    # containerd (containerd/root): nothing can be pulled here, and a runtime image takes minutes to
    # import. `purge` removes them too.
    state = ("etcd", "kubelet", "pod-logs", "containerd/state", "cni", "trainer-tmp", "webhook-certs", "volumes", "kfp")
    for name in state:
        shutil.rmtree(RUN / name, ignore_errors=True)
    KUBECONFIG.unlink(missing_ok=True)
    log("cluster down")


def purge() -> None:
    down()
    shutil.rmtree(RUN, ignore_errors=True)
    log(f"removed {RUN} (PKI, imported images)")


def env() -> None:
    print(f"export KUBECONFIG={KUBECONFIG}")


if __name__ == "__main__":
    actions = {"up": up, "down": down, "purge": purge, "env": env}
    if len(sys.argv) != 2 or sys.argv[1] not in actions:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(actions)}")
    actions[sys.argv[1]]()
