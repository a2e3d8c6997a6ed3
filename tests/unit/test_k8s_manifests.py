"""k8s/ (what `kubectl apply -f k8s/` deploys), the Dockerfile and the observability config,
checked without a cluster: schemas, the wiring between objects, the services' real argument
parsers, and the Grafana dashboard against the metric names the services export."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest
from k8s_objects import (
    K8S, NAMESPACE, OBJECTS, ROOT, WORKLOADS, backing_container, config_file, container_port, containers,
    env_of, flag, get, of_kind, pod_spec, port_of, service_for_host, specmesh_containers,
)

from specmesh.telemetry.metrics import PROMETHEUS

KUBERNETES_VERSIONS = ["1.27", kubernetes_validate.latest_version()]  # 1.27: gRPC probes are GA

# The Prometheus metrics the services export (the contract), by type.
METRICS = PROMETHEUS
SERIES_SUFFIXES = {"counter": [""], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}

# DESIGN.md §3 ports, by service and container port name.
PORTS = {
    "orchestrator": {"grpc": 50051, "http": 8080},
    "verifier": {"grpc": 50061, "metrics": 8061},
    "drafter": {"grpc": 50071, "metrics": 8071, "data": 50081},
}
# The flag each service serves /metrics on.
METRICS_FLAG = {"orchestrator": "--http-port", "verifier": "--metrics-port", "drafter": "--metrics-port"}
# Flags being added by other work: tolerated (and only these) while a parser lacks them.
FLAGS_BEING_ADDED: set[str] = set()

KINDS = {  # kind -> (apiVersion, namespaced)
    "Namespace": ("v1", False), "ConfigMap": ("v1", True), "Service": ("v1", True),
    "ServiceAccount": ("v1", True), "Deployment": ("apps/v1", True), "StatefulSet": ("apps/v1", True),
    "Role": ("rbac.authorization.k8s.io/v1", True), "RoleBinding": ("rbac.authorization.k8s.io/v1", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", False),
}

def build_parser(role: str):
    import importlib

    from specmesh.cli import SERVICES

    return importlib.import_module(SERVICES[role]).build_parser()


def parse_service_args(role: str, args: list[str]):
    """Parse with the service's real parser; only FLAGS_BEING_ADDED may be unknown to it."""
    try:
        parsed, unknown = build_parser(role).parse_known_args(args)
    except SystemExit:
        pytest.fail(f"`specmesh serve {role} {' '.join(args)}` does not parse")
    pending = [a for i, a in enumerate(unknown) if a in FLAGS_BEING_ADDED or (i and unknown[i - 1] in FLAGS_BEING_ADDED)]
    assert unknown == pending, f"{role}: unknown arguments {unknown}"
    return parsed


# ---- every object ----------------------------------------------------------------------------

def test_manifests_are_flat_and_the_namespace_comes_first():
    assert not [p for p in K8S.rglob("*.y*ml") if p.parent != K8S], "kubectl apply -f k8s/ is not recursive"
    assert OBJECTS[0]["kind"] == "Namespace" and OBJECTS[0]["metadata"]["name"] == NAMESPACE


def test_every_object_is_a_known_kind_in_the_namespace():
    seen = set()
    for obj in OBJECTS:
        assert obj["kind"] in KINDS, f"{obj['_file']}: unexpected kind {obj['kind']}"
        api_version, namespaced = KINDS[obj["kind"]]
        assert obj["apiVersion"] == api_version, obj["_file"]
        meta = obj["metadata"]
        assert meta["name"], obj["_file"]
        assert meta.get("namespace") == (NAMESPACE if namespaced else None), f"{obj['_file']}: {meta['name']}"
        assert (obj["kind"], meta["name"]) not in seen, f"duplicate {obj['kind']} {meta['name']}"
        seen.add((obj["kind"], meta["name"]))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_matches_the_kubernetes_schema(version):
    for obj in OBJECTS:
        doc = {k: v for k, v in obj.items() if k != "_file"}
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{obj['_file']} {obj['kind']}/{obj['metadata']['name']}: {error.message} at {list(error.path)}")


def test_workload_selectors_match_their_pod_labels():
    for workload in of_kind(*WORKLOADS):
        selector = workload["spec"]["selector"]["matchLabels"].items()
        assert selector <= workload["spec"]["template"]["metadata"]["labels"].items(), workload["metadata"]["name"]


def test_services_select_one_workload_and_target_its_ports():
    for service in of_kind("Service"):
        for port in service["spec"]["ports"]:
            backing_container(service, port["port"])


def test_referenced_configmaps_and_service_accounts_exist():
    for workload in of_kind(*WORKLOADS):
        spec = pod_spec(workload)
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                data = get("ConfigMap", volume["configMap"]["name"])["data"]
                assert {item["key"] for item in volume["configMap"].get("items", [])} <= data.keys()
        for container in spec["containers"]:
            env_of(container)  # every envFrom ConfigMap exists
            mounts = {m["name"] for m in container.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in spec.get("volumes", [])}
        if "serviceAccountName" in spec:
            get("ServiceAccount", spec["serviceAccountName"])


def test_images_are_pinned_and_specmesh_matches_the_package_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for workload in of_kind(*WORKLOADS):
        for container in containers(workload):
            name, _, tag = container["image"].partition(":")
            assert tag and tag != "latest", f"{container['image']}: pin a tag"
            if name == "specmesh":
                assert tag == version
                assert container.get("imagePullPolicy") == "IfNotPresent"  # a locally built image


# ---- the specmesh services -------------------------------------------------------------------

def test_all_three_services_are_deployed():
    assert sorted(role for _, _, role in specmesh_containers()) == sorted(PORTS)


def test_service_args_parse_with_the_real_parsers_and_use_the_design_ports():
    for _, container, role in specmesh_containers():
        args = container["args"][2:]
        parsed = parse_service_args(role, args)
        assert parsed.port == PORTS[role]["grpc"] == container_port(container, "grpc")
        metrics_port = int(flag(args, METRICS_FLAG[role]))
        assert metrics_port == container_port(container, "http" if role == "orchestrator" else "metrics")
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == PORTS[role]
        if role == "drafter":  # the data plane's port, which the drafter advertises in the registry
            assert parsed.data_port == PORTS[role]["data"]


def test_verifiers_and_drafters_advertise_their_pod_ip():
    for _, container, role in specmesh_containers():
        if role == "orchestrator":
            continue
        parsed = parse_service_args(role, container["args"][2:])
        match = re.fullmatch(r"\$\((\w+)\)", parsed.advertise_host)
        assert match, f"{role}: --advertise-host must be an env var expanded by Kubernetes"
        assert env_of(container)[match.group(1)] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_verifier_grace_period_outlasts_its_drain():
    for workload, container, role in specmesh_containers():
        if role == "verifier":
            drain_s = parse_service_args(role, container["args"][2:]).drain_s
            assert pod_spec(workload)["terminationGracePeriodSeconds"] >= drain_s + 10


def test_probes_use_grpc_health_and_the_verifier_has_time_to_load():
    for _, container, role in specmesh_containers():
        grpc_port = PORTS[role]["grpc"]
        assert container["readinessProbe"]["grpc"]["port"] == grpc_port
        assert container_port(container, container["livenessProbe"]["tcpSocket"]["port"]) == grpc_port
        if role == "verifier":
            startup = container["startupProbe"]
            assert startup["grpc"]["port"] == grpc_port
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # model load + profile


def test_the_orchestrator_service_exposes_grpc_and_http():
    service = get("Service", "orchestrator")
    assert {p["port"] for p in service["spec"]["ports"]} == set(PORTS["orchestrator"].values())
    for port in PORTS["orchestrator"].values():
        assert backing_container(service, port)[1] == port


def test_redis_url_points_at_the_redis_service():
    for _, container, role in specmesh_containers():
        url = flag(container["args"], "--redis-url") or env_of(container)["SPECMESH_REDIS_URL"]
        parsed = urlparse(url)
        assert parsed.scheme == "redis"
        redis_container, port = backing_container(service_for_host(parsed.hostname), parsed.port)
        assert redis_container["image"].startswith("redis:") and port == 6379


def test_traces_reach_the_collector_on_a_port_it_receives_otlp_on():
    names = set()
    for _, container, role in specmesh_containers():
        env = env_of(container)
        endpoint = urlparse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        collector, port = backing_container(service_for_host(endpoint.hostname), endpoint.port)
        assert collector["image"].startswith("otel/opentelemetry-collector")
        protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        receiver = collector_config()["receivers"]["otlp"]["protocols"]["grpc" if protocol == "grpc" else "http"]
        assert port_of(receiver["endpoint"]) == port
        assert env["OTEL_TRACES_SAMPLER"] in {"always_on", "always_off", "traceidratio", "parentbased_always_on",
                                              "parentbased_always_off", "parentbased_traceidratio"}
        names.add(env["OTEL_SERVICE_NAME"])
    assert len(names) == len(PORTS), "each service needs its own OTEL_SERVICE_NAME"


# ---- the observability stack -----------------------------------------------------------------

def collector_config() -> dict:
    (deployment,) = [w for w in of_kind(*WORKLOADS) if containers(w)[0]["image"].startswith("otel/")]
    container = containers(deployment)[0]
    path = Path(re.fullmatch(r"--config=(.+)", container["args"][0]).group(1))
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"]]
    return config_file(volume["configMap"]["name"], path.name)


def test_collector_pipelines_are_complete_and_send_traces_to_jaeger():
    config = collector_config()
    for pipeline in config["service"]["pipelines"].values():
        for part in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(part, [])) <= config.get(part, {}).keys(), part
    assert set(config["service"].get("extensions", [])) <= config.get("extensions", {}).keys()
    (exporter,) = [e for e in config["service"]["pipelines"]["traces"]["exporters"] if e.split("/")[0] == "otlp"]
    host, port = config["exporters"][exporter]["endpoint"].rsplit(":", 1)
    jaeger, target = backing_container(service_for_host(host), int(port))
    assert jaeger["image"].startswith("jaegertracing/") and target == 4317


def test_prometheus_discovers_and_scrapes_every_specmesh_pod():
    scrape = config_file("prometheus-config", "prometheus.yml")
    (job,) = [j for j in scrape["scrape_configs"] if "kubernetes_sd_configs" in j]
    assert job["kubernetes_sd_configs"][0]["role"] == "pod"
    assert NAMESPACE in job["kubernetes_sd_configs"][0]["namespaces"]["names"]
    prefix = "__meta_kubernetes_pod_annotation_"
    relabels = job["relabel_configs"]
    (keep,) = [r for r in relabels if r.get("action") == "keep" and r["source_labels"][0].startswith(prefix)]
    used = {label[len(prefix):] for r in relabels for label in r.get("source_labels", []) if label.startswith(prefix)}
    assert used == {"prometheus_io_scrape", "prometheus_io_port", "prometheus_io_path"}
    for workload, container, role in specmesh_containers():
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        by_label = {re.sub(r"[^a-zA-Z0-9_]", "_", key): value for key, value in annotations.items()}
        assert used <= by_label.keys(), role
        assert re.fullmatch(keep["regex"], by_label[keep["source_labels"][0][len(prefix):]])
        assert int(by_label["prometheus_io_port"]) == int(flag(container["args"], METRICS_FLAG[role]))
        assert by_label["prometheus_io_path"] == "/metrics"


def test_prometheus_may_list_and_watch_pods():
    deployment = get("Deployment", "prometheus")
    account = pod_spec(deployment)["serviceAccountName"]
    roles = []
    for binding in of_kind("RoleBinding", "ClusterRoleBinding"):
        if {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in binding["subjects"]:
            roles.append(get(binding["roleRef"]["kind"], binding["roleRef"]["name"]))
    rules = [r for role in roles for r in role["rules"] if "" in r["apiGroups"] and "pods" in r["resources"]]
    assert any({"list", "watch"} <= set(r["verbs"]) for r in rules)


def dashboard() -> dict:
    (configmap,) = [c for c in of_kind("ConfigMap") if any(k.endswith(".json") for k in c["data"])]
    (text,) = configmap["data"].values()
    return json.loads(text)


def test_dashboard_panels_query_only_contract_metrics_and_cover_them_all():
    panels = [p for p in dashboard()["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in panels}) == len(panels)
    used = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            for series in re.findall(r"\bspecmesh_\w+", expr):
                name = next((m for m in METRICS if series in [m + s for s in SERIES_SUFFIXES[METRICS[m]]]), None)
                assert name, f"{panel['title']}: {series} is not a contract metric (or a wrong suffix for its type)"
                used.add(name)
                if series.endswith("_bucket"):
                    assert re.search(r"histogram_quantile\(0?\.\d+, sum by \([^)]*\ble\b", expr), expr
                if METRICS[name] == "counter":
                    assert re.search(rf"(rate|increase)\({series}\[", expr), f"{expr}: take the rate of a counter"
    assert used == METRICS.keys(), f"no panel for {sorted(METRICS.keys() - used)}"


def test_grafana_provisions_prometheus_and_the_dashboard():
    deployment = get("Deployment", "grafana")
    (container,) = containers(deployment)
    sources = config_file("grafana-provisioning", "datasources.yaml")["datasources"]
    (prometheus,) = [s for s in sources if s["type"] == "prometheus"]
    url = urlparse(prometheus["url"])
    assert backing_container(service_for_host(url.hostname), url.port)[0]["image"].startswith("prom/prometheus")
    for panel in dashboard()["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == prometheus["uid"]
    (provider,) = config_file("grafana-provisioning", "dashboards.yaml")["providers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == provider["options"]["path"]]
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"]]
    files = get("ConfigMap", volume["configMap"]["name"])["data"]
    home = env_of(container)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home).parent == Path(mount["mountPath"]) and Path(home).name in files


# ---- the image -------------------------------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_bakes_the_model_and_runs_specmesh():
    instructions = dockerfile_instructions()
    (entrypoint,) = [arg for op, arg in instructions if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["specmesh"]
    runs = [arg for op, arg in instructions if op == "RUN"]
    assert any(re.search(r"\bspecmesh fetch-model\b", run) for run in runs)
    assert any(re.search(r"pip install \"?\.\[model\]", run) for run in runs)
    model_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["model"]
    (torch_pin,) = [req for req in model_extra if req.startswith("torch==")]
    assert any(torch_pin in run for run in runs), f"the image must install {torch_pin}"
    exposed = {int(p) for op, arg in instructions if op == "EXPOSE" for p in arg.split()}
    assert exposed >= {port for ports in PORTS.values() for port in ports.values()}


def test_dockerignore_lets_through_what_the_dockerfile_copies():
    allowed = {line[1:].strip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for op, arg in dockerfile_instructions():
        if op == "COPY":
            for source in arg.split()[:-1]:
                assert source in allowed and (ROOT / source).exists(), source
