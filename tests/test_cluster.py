"""Cluster configs: Ray's own validation of the launcher YAMLs, scale-from-zero GPU types, no public
Ray ports, token auth everywhere, the KubeRay manifests; slow: a token-auth head on 127.0.0.1
refuses/accepts job submissions, and the fake-GPU local cluster scales up for a sweep and back down.

    pytest tests/test_cluster.py -q                 # fast checks (< 5 s)
    pytest tests/test_cluster.py -q -m slow         # the two real-Ray tests (~1 min on 2 cores)
"""
import copy
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import ray
import requests
import yaml
from conftest import demo_module
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
LAUNCHERS = ["aws.yaml", "gcp.yaml"]        # cloud launcher configs: defaults merged by prepare_config
KUBERAY = ["kuberay/raycluster.yaml", "kuberay/rayjob.yaml"]
RAY_PORTS = {6379, 8265, 10001}            # GCS, dashboard + job API, Ray client
PUBLIC = {"0.0.0.0/0", "::/0"}


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def ray_validate(cfg: dict, name: str) -> None:
    """What the autoscaler does with the file: `ray up` prepares then validates a cloud config; the
    fake provider's monitor validates local.yaml raw (its defaults file is not in the 2.60 wheel)."""
    cfg = copy.deepcopy(cfg)
    validate_config(cfg if name == "local.yaml" else prepare_config(cfg))


def gpu_types(cfg: dict) -> dict:
    return {k: t for k, t in cfg["available_node_types"].items() if t["resources"].get("GPU", 0) > 0}


# ---------------------------------------------------------------- Ray's validation, positive and negative

@pytest.mark.parametrize("name", LAUNCHERS + ["local.yaml"])
def test_launcher_yaml_passes_ray_validation(name):
    ray_validate(load(name), name)


def _drop(key):
    def f(cfg):
        del cfg["available_node_types"][next(iter(gpu_types(cfg)))][key]
    return f


def _set_worker(key, value):
    def f(cfg):
        cfg["available_node_types"][next(iter(gpu_types(cfg)))][key] = value
    return f


def _set_gpu(cfg):
    cfg["available_node_types"][next(iter(gpu_types(cfg)))]["resources"]["GPU"] = 0.5


def _min_over_max(cfg):
    cfg["available_node_types"][next(iter(gpu_types(cfg)))]["min_workers"] = cfg["max_workers"] + 1


V, E = jsonschema.ValidationError, ValueError
BREAKAGES = {  # what breaks -> (the edit, the error Ray raises, its message)
    "worker without resources": (_drop("resources"), V, "'resources' is a required property"),
    "worker without node_config": (_drop("node_config"), V, "'node_config' is a required property"),
    "max_workers a string": (_set_worker("max_workers", "eight"), V, "'eight' is not of type 'integer'"),
    "fractional GPU resource": (_set_gpu, V, "0.5 is not of type 'integer'"),
    "unknown node type key": (_set_worker("gpus", 1), V, "'gpus' was unexpected"),
    "head type not a node type": (lambda c: c.update(head_node_type="nope"), E, "must be one of"),
    "min_workers above the global bound": (_min_over_max, E, "smaller than the sum of `min_workers`"),
}


@pytest.mark.parametrize("name", LAUNCHERS + ["local.yaml"])
@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_broken_copy_fails_ray_validation(name, breakage):
    edit, error, message = BREAKAGES[breakage]
    cfg = load(name)
    edit(cfg)
    with pytest.raises(error, match=re.escape(message)):
        ray_validate(cfg, name)


# ---------------------------------------------------------------- shape: CPU head, GPU workers from zero

@pytest.mark.parametrize("name", LAUNCHERS + ["local.yaml"])
def test_cpu_head_runs_no_trials_and_gpu_workers_scale_from_zero(name):
    cfg = load(name)
    head = cfg["available_node_types"][cfg["head_node_type"]]
    assert head["resources"].get("CPU") == 0 and head["resources"].get("GPU", 0) == 0, head["resources"]
    assert gpu_types(cfg), "no GPU worker type"
    for t in gpu_types(cfg).values():
        assert t["min_workers"] == 0
        assert 1 <= t["max_workers"] <= cfg["max_workers"]
        assert t["resources"]["CPU"] >= 1
    assert 0 < cfg["idle_timeout_minutes"] <= 30


def test_local_yaml_is_complete_for_the_fake_provider():
    cfg = load("local.yaml")
    p = cfg["provider"]
    assert p["type"] == "fake_multinode" and p["use_node_id_as_ip"] and p["disable_node_updaters"]
    assert cfg["head_node_type"] == "ray.head.default"  # FakeMultiNodeProvider's fixed head type
    for t in gpu_types(cfg).values():
        assert t["resources"]["GPU"] == 1 and t["resources"]["CPU"] == 1
    # the v1 autoscaler reads these keys from the raw file (KeyError otherwise)
    for key in ("file_mounts", "cluster_synced_files", "worker_setup_commands", "worker_start_ray_commands",
                "head_setup_commands", "setup_commands", "initialization_commands", "auth", "docker"):
        assert key in cfg, key


# ---------------------------------------------------------------- security: no public Ray ports, token auth

def publicly_open_ports(cfg: dict) -> set:
    """Ray ports an AWS security-group rule in `cfg` opens to the whole internet."""
    opened = set()
    for rule in cfg.get("provider", {}).get("security_group", {}).get("IpPermissions", []):
        ranges = {r.get("CidrIp") for r in rule.get("IpRanges", [])} | {
            r.get("CidrIpv6") for r in rule.get("Ipv6Ranges", [])}
        if not ranges & PUBLIC:
            continue
        if str(rule.get("IpProtocol")) == "-1":
            opened |= RAY_PORTS
        else:
            opened |= {p for p in RAY_PORTS if rule.get("FromPort", 0) <= p <= rule.get("ToPort", -1)}
    return opened


def start_commands(cfg: dict) -> list:
    return [c for c in cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"] if "ray start" in c]


@pytest.mark.parametrize("name", LAUNCHERS + ["local.yaml"])
def test_no_launcher_opens_ray_ports_to_the_internet(name):
    cfg = load(name)
    assert publicly_open_ports(cfg) == set()
    for c in start_commands(cfg):
        assert "0.0.0.0" not in c, c  # the dashboard binds 127.0.0.1 (Ray's default) or is unset


def test_public_port_check_catches_an_open_rule():
    cfg = load("aws.yaml")
    cfg["provider"]["security_group"]["IpPermissions"] = [
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 9000, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
        {"IpProtocol": "tcp", "FromPort": 6379, "ToPort": 6379, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]}]
    assert publicly_open_ports(cfg) == {8265}
    cfg["provider"]["security_group"]["IpPermissions"] = [{"IpProtocol": "-1", "Ipv6Ranges": [{"CidrIpv6": "::/0"}]}]
    assert publicly_open_ports(cfg) == RAY_PORTS


@pytest.mark.parametrize("name", LAUNCHERS)
def test_cloud_nodes_start_with_token_auth_and_a_private_dashboard(name):
    cfg = load(name)
    starts = start_commands(cfg)
    assert len(starts) == 2, "one ray start for the head, one for workers"
    for c in starts:
        assert re.search(r"\bRAY_AUTH_MODE=token ray start\b", c), c
    head = " ".join(cfg["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "--autoscaling-config=~/ray_bootstrap_config.yaml" in head
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"  # Ray's default token path


@pytest.mark.parametrize("name", LAUNCHERS)
def test_cloud_setup_installs_this_package_at_the_installed_ray_version(name):
    cfg = load(name)
    remote = [r for r, local in cfg["file_mounts"].items() if local == "."]
    assert len(remote) == 1, "the working dir (repo root) must be file-mounted once"
    assert any("pip install" in c and f"-e {remote[0]}" in c for c in cfg["setup_commands"])
    assert (ROOT / "pyproject.toml").is_file()
    version = ray.__version__
    assert cfg["docker"]["head_image"].endswith(f":{version}-py311")
    assert cfg["docker"]["worker_image"].endswith(f":{version}-py311-gpu")


# ---------------------------------------------------------------- KubeRay manifests

def kuberay_docs(name: str) -> list:
    docs = [d for d in yaml.safe_load_all((CLUSTER / name).read_text()) if d]
    assert docs
    return docs


def ray_cluster_spec(doc: dict) -> dict:
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def ray_containers(spec: dict) -> list:
    groups = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


@pytest.mark.parametrize("name,kind", [("kuberay/raycluster.yaml", "RayCluster"), ("kuberay/rayjob.yaml", "RayJob")])
def test_kuberay_manifest_has_what_the_operator_needs(name, kind):
    (doc,) = [d for d in kuberay_docs(name) if d.get("kind") == kind]
    assert doc["apiVersion"] == "ray.io/v1" and doc["metadata"]["name"]
    spec = ray_cluster_spec(doc)
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["rayVersion"] == ray.__version__
    head = spec["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict) and head["rayStartParams"]["num-cpus"] == "0"
    gpu_groups = [g for g in spec["workerGroupSpecs"]
                  if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]]
    assert gpu_groups
    for g in spec["workerGroupSpecs"]:
        assert isinstance(g["rayStartParams"], dict) and g["groupName"]
        assert g["minReplicas"] == 0 and g["replicas"] == 0 and g["maxReplicas"] >= 1
    for c in ray_containers(spec):
        assert c["name"] and c["image"]
    if kind == "RayJob":
        entry = shlex.split(doc["spec"]["entrypoint"])
        assert entry[:3] == ["python", "-m", "sweeper.run"]
        assert doc["spec"]["shutdownAfterJobFinishes"] is True


@pytest.mark.parametrize("name", KUBERAY)
def test_kuberay_token_auth_on_every_ray_container(name):
    for doc in kuberay_docs(name):
        if doc["kind"] not in ("RayCluster", "RayJob"):
            continue
        spec = ray_cluster_spec(doc)
        secret = spec["authOptions"]["secretName"]
        assert spec["authOptions"]["mode"] == "token" and secret
        for c in ray_containers(spec):
            env = {e["name"]: e for e in c["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": secret, "key": "auth_token"}  # the key KubeRay's Secret uses


def values_of(obj, key: str) -> list:
    """Every value stored under `key` anywhere in a parsed YAML tree."""
    if isinstance(obj, dict):
        return [v for k, v in obj.items() if k == key] + [x for v in obj.values() for x in values_of(v, key)]
    if isinstance(obj, list):
        return [x for v in obj for x in values_of(v, key)]
    return []


@pytest.mark.parametrize("name", KUBERAY + ["kuberay/storage.yaml", "kuberay/networkpolicy.yaml"])
def test_kuberay_nothing_public(name):
    for doc in kuberay_docs(name):
        assert doc["kind"] not in ("Ingress", "Service", "Gateway"), doc["kind"]
        assert not {"LoadBalancer", "NodePort"} & set(map(str, values_of(doc, "serviceType") + values_of(doc, "type")))
        assert not any(values_of(doc, "hostPort")) and not any(values_of(doc, "hostNetwork"))
        if doc["kind"] in ("RayCluster", "RayJob"):
            head = ray_cluster_spec(doc)["headGroupSpec"]
            assert head["serviceType"] == "ClusterIP" and head.get("enableIngress", False) is False


def selects(selector: dict, labels: dict) -> bool:
    """A Kubernetes label selector (matchLabels; {} selects everything) against a pod's labels."""
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def admits(policy: dict, src_ns: str, src_labels: dict, port: int, ns: str) -> bool:
    """Whether a NetworkPolicy of namespace `ns` lets a pod (src_ns, src_labels) connect to `port` of
    a pod it selects, by the Kubernetes rules: a peer with a podSelector alone means pods of `ns`;
    a namespaceSelector and a podSelector in one peer must both match; a rule without ports covers all."""
    def peer_ok(peer):
        if "namespaceSelector" in peer:
            ns_ok = selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": src_ns})
        else:
            ns_ok = src_ns == ns
        return ns_ok and selects(peer.get("podSelector", {}), src_labels)

    return any(any(peer_ok(p) for p in rule.get("from", [])) and
               (not rule.get("ports") or any(p["port"] == port and p.get("protocol", "TCP") == "TCP"
                                             for p in rule["ports"]))
               for rule in policy["spec"].get("ingress", []))


def test_kuberay_network_policy_keeps_other_namespaces_off_the_dashboard():
    (policy,) = kuberay_docs("kuberay/networkpolicy.yaml")
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
    # the labels KubeRay puts on a head pod and on a worker pod (of a RayCluster or a RayJob's cluster)
    head = {"ray.io/is-ray-node": "yes", "ray.io/node-type": "head", "ray.io/cluster": "vbi-mur"}
    worker = {"ray.io/is-ray-node": "yes", "ray.io/node-type": "worker", "ray.io/group": "gpu"}
    assert selects(policy["spec"]["podSelector"], head) and selects(policy["spec"]["podSelector"], worker)
    dashboard = 8265
    (head_spec,) = [c for c in ray_containers(kuberay_docs("kuberay/raycluster.yaml")[0]["spec"])
                    if c["name"] == "ray-head"]
    assert {"containerPort": dashboard, "name": "dashboard"} in head_spec["ports"]
    ns = "sweeps"
    assert admits(policy, ns, worker, 6379, ns) and admits(policy, ns, {"app": "submitter"}, dashboard, ns)
    assert not admits(policy, "other-team", {}, dashboard, ns)
    assert not admits(policy, "other-team", worker, dashboard, ns)  # Ray labels in another namespace
    operator = {"app.kubernetes.io/name": "kuberay-operator"}
    assert admits(policy, "ray-system", operator, dashboard, ns)
    assert not admits(policy, "ray-system", operator, 6379, ns)
    assert not admits(policy, "ray-system", {"app": "anything-else"}, dashboard, ns)


def test_rayjob_entrypoint_parses_with_sweeper_run():
    from sweeper import run

    (doc,) = [d for d in kuberay_docs("kuberay/rayjob.yaml") if d["kind"] == "RayJob"]
    args = run.parse_args(shlex.split(doc["spec"]["entrypoint"])[3:])
    assert args.gpus_per_trial == 0.25 and args.storage.startswith("/mnt/shared")


# ---------------------------------------------------------------- slow: real Ray on 127.0.0.1

def _cli_env(home: Path, **kw) -> dict:
    """This env without any Ray token or address, HOME without ~/.ray/auth_token, plus `kw`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    return {**env, "HOME": str(home), **kw}


@pytest.mark.slow
def test_token_auth_head_refuses_unauthenticated_and_accepts_authenticated_jobs(job_head, tmp_path):
    """A head with its dashboard (conftest.job_head: `ray start --head` with RAY_AUTH_MODE=token, on
    127.0.0.1) refuses job submissions without a token (401) and with a wrong one (403), and runs them with
    the right one, through the SDK and the documented CLI; the refused ones leave no job behind."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    dashboard, token = job_head.dashboard, job_head.env["RAY_AUTH_TOKEN"]
    client = JobSubmissionClient(dashboard, headers={"Authorization": f"Bearer {token}"})
    assert client.list_jobs() == []  # the module's own head: every job below is this test's
    body = {"entrypoint": "python -c 'print(6 * 7)'"}
    assert requests.post(f"{dashboard}/api/jobs/", json=body, timeout=10).status_code == 401
    wrong = {"Authorization": f"Bearer {secrets.token_hex(32)}"}
    assert requests.post(f"{dashboard}/api/jobs/", json=body, headers=wrong, timeout=10).status_code == 403
    assert requests.get(f"{dashboard}/api/jobs/", timeout=10).status_code == 401

    job = client.submit_job(**body)
    deadline = time.time() + 60
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED) and time.time() < deadline:
        time.sleep(0.5)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED
    assert "42" in client.get_job_logs(job)

    # the documented CLI way: RAY_AUTH_MODE=token + the token (here by value) in the environment
    submit = [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", dashboard, "--no-wait", "--", "echo", "hi"]
    refused = subprocess.run(submit, check=False, env=_cli_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Unauthorized" in refused.stdout + refused.stderr
    ok = subprocess.run(submit, check=False, env=_cli_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token),
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    cli_job = re.search(r"raysubmit_\w+", ok.stdout + ok.stderr).group(0)
    assert {j.submission_id for j in client.list_jobs()} == {job, cli_job}


@pytest.mark.slow
def test_local_fake_gpu_cluster_scales_up_for_a_sweep_and_back_down():
    """The demo's fake-GPU cluster (cluster/local.yaml, autoscaler loop every second) from zero workers: two
    one-second GPU trials bring workers up, within max_workers, and after the job the idle timeout
    (6 s here: the config's key, which the autoscaler reads; local.yaml has 15 s) takes them all down."""
    demo = demo_module()
    idle_min = 0.1
    res = demo.run_demo("tiny", trials=2, seconds=1.0, idle_timeout_minutes=idle_min,
                        max_workers=2, timeout_s=400)
    print(json.dumps({k: v for k, v in res.items() if k != "job_log_tail"}))
    t = {e["event"]: e["t_s"] for e in res["events"]}
    assert res["job_status"] == "SUCCEEDED", res["job_log_tail"]
    assert res["job_result"] == {"trials_done": 2, "x2": [0, 1]}, res["job_log_tail"]  # both ran, on a fake GPU
    assert 1 <= res["peak_workers"] <= 2
    assert t["job_submitted"] < t["workers_up"] < t["job_finished"] < t["workers_removed"]
    assert res["workers_over_time"][0][1] == 0             # scaled from zero
    assert t["workers_removed"] - t["job_finished"] <= idle_min * 60 + 60
    assert demo.pids_using(Path(res["temp_dir"])) == []
