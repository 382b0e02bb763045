"""deploy/kubernetes: the manifests lint clean (yamllint, with every other
YAML file under deploy/), validate against the Kubernetes schemas
(kubernetes-validate, offline), and agree with each other and with sluice:
the grace period covers the preStop sleep and the drain the args set, the
probes hit /health and /ready on the port sluice listens on, the pod runs as
the image's user with a read-only root, the Service, PodDisruptionBudget and
HorizontalPodAutoscaler select the Deployment's pods. A real server serves
the ConfigMap's config file, its shared-memory segment fits the /dev/shm
volume, and it publishes the metric the autoscaler reads."""
import os
import re
import shutil
import subprocess
import urllib.request

import pytest
import yaml

from deploy_files import DEFAULT_MODEL, SERVER_FLAGS, parse_config
from paths import REPO
from serve import Server

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
CONTAINERFILE = DEPLOY / "container" / "Containerfile"
# the oldest release whose schemas kubernetes-validate bundles, and its newest
K8S_VERSIONS = ("1.25.0", "1.37.0")
# seconds the processes get to exit after the drain ends
EXIT_MARGIN_MIN = 5


def documents():
    """kind -> the resource, over every manifest (one kind each)."""
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] not in out, f"two {doc['kind']} resources"
            out[doc["kind"]] = doc
    return out


def container(docs):
    containers = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def arg(c, name):
    args = c["args"]
    assert args.count(name) == 1, f"{name} once in the args"
    return args[args.index(name) + 1]


def parse_quantity(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", str(q))
    assert m, q
    return int(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[m.group(2)]


def test_yaml_under_deploy_lints_clean():
    if shutil.which("yamllint") is None:
        pytest.skip("yamllint is not installed (Debian package 'yamllint'; tools/setup.sh installs it)")
    files = sorted(str(p) for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))
    assert files
    r = subprocess.run(["yamllint", "--strict", "-f", "parsable", *files], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(version):
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed "
                             "(tests/requirements.txt; tools/setup.sh installs it)")
    for kind, doc in documents().items():
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{kind} against Kubernetes {version}: {e}")


def test_grace_period_covers_prestop_and_drain():
    docs = documents()
    pod, c = docs["Deployment"]["spec"]["template"]["spec"], container(docs)
    sleep = c["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep" and len(sleep) == 2
    drain = int(arg(c, "--drain-delay")) + int(arg(c, "--drain-timeout"))
    # the grace period runs from the preStop hook's start to SIGKILL
    margin = pod["terminationGracePeriodSeconds"] - int(sleep[1]) - drain
    assert EXIT_MARGIN_MIN <= margin <= 30, (pod["terminationGracePeriodSeconds"], sleep, drain)
    # the config file must not set them too (the args win, and two values would mislead)
    conf = parse_config(docs["ConfigMap"]["data"]["sluice.conf"])
    assert "drain-delay" not in conf and "drain-timeout" not in conf


def test_probes_and_ports_match_sluice():
    docs = documents()
    c = container(docs)
    assert arg(c, "--host") == "0.0.0.0"
    port = int(arg(c, "--port"))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": port}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    svc = docs["Service"]["spec"]
    assert [p["targetPort"] for p in svc["ports"]] == ["http"]


def test_pod_runs_unprivileged_with_writable_shm_and_tmp_only():
    docs = documents()
    pod, c = docs["Deployment"]["spec"]["template"]["spec"], container(docs)
    uid = re.search(r"^USER (\d+):(\d+)$", CONTAINERFILE.read_text(), re.M)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(uid.group(1))
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert "emptyDir" in volumes[mounts["/tmp"]]
    config_dir = os.path.dirname(arg(c, "--config"))
    key = os.path.basename(arg(c, "--config"))
    assert volumes[mounts[config_dir]]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    assert key in docs["ConfigMap"]["data"]
    assert {"requests", "limits"} <= set(c["resources"])


def test_service_budget_and_autoscaler_select_the_deployment():
    docs = documents()
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": docs["Deployment"]["metadata"]["name"]}
    assert hpa["minReplicas"] >= 2, "the PodDisruptionBudget lets one go: keep one serving"
    assert [m["type"] for m in hpa["metrics"]] == ["Pods"]


def test_sluice_serves_the_configmap_and_fits_the_shm_volume(tmp_path):
    docs = documents()
    c = container(docs)
    conf = tmp_path / "sluice.conf"
    conf.write_text(docs["ConfigMap"]["data"]["sluice.conf"])
    settings = parse_config(conf.read_text())
    frontends = int(arg(c, "--frontends"))
    s = Server(DEFAULT_MODEL, tmp_path, frontends=frontends, extra=["--config", str(conf)])
    try:
        cfg = s.admin("effective-config")["config"]
        for name, value in settings.items():
            assert name in cfg, f"ConfigMap: {name} is not a sluice serve setting"
            if name not in SERVER_FLAGS:
                assert cfg[name] == {"value": value, "source": "file"}, (name, cfg[name])
        # the segment's whole size, not just what the master reserves at
        # start: grammar slices past the volume's limit would be refused
        segment = f"/dev/shm/sluice-{s.port}-{s.proc.pid}"
        size = os.stat(segment).st_size
        pod = docs["Deployment"]["spec"]["template"]["spec"]
        shm = next(v for v in pod["volumes"]
                   if v["name"] == next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"))
        assert size <= parse_quantity(shm["emptyDir"]["sizeLimit"]), (size, shm)
        limit = parse_quantity(c["resources"]["limits"]["memory"])
        assert size <= limit // 4, "the segment counts against the memory limit: leave room for the rest"
        metric = docs["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["metric"]["name"]
        with urllib.request.urlopen(s.base + "/metrics", timeout=5) as r:
            text = r.read().decode()
        assert re.search(rf"^{metric}(\{{[^}}]*\}})? \d+", text, re.M), f"{metric} is not on /metrics"
    finally:
        s.stop()
