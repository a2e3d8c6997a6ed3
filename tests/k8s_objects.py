"""The objects in k8s/ as `kubectl apply -f k8s/` reads them, and lookups that follow the links
between them (Service -> pods -> container port, envFrom -> ConfigMap, ...). For the tests."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
NAMESPACE = "specmesh"
WORKLOADS = ("Deployment", "StatefulSet")


def manifest_files() -> list[Path]:
    """What `kubectl apply -f k8s/` reads, in its (lexical) order."""
    return sorted(p for p in K8S.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def load_objects() -> list[dict]:
    objects = []
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                objects.append({**doc, "_file": path.name})
    return objects


OBJECTS = load_objects()


def of_kind(*kinds: str) -> list[dict]:
    return [o for o in OBJECTS if o["kind"] in kinds]


def get(kind: str, name: str) -> dict:
    found = [o for o in of_kind(kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found[0]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def containers(workload: dict) -> list[dict]:
    return pod_spec(workload)["containers"]


def specmesh_containers() -> list[tuple[dict, dict, str]]:
    """(workload, container, role) for every container running the specmesh image."""
    found = []
    for workload in of_kind(*WORKLOADS):
        for container in containers(workload):
            if container["image"].split(":")[0] == "specmesh":
                args = container["args"]
                assert args[:1] == ["serve"], f"{container['name']}: args must start with `serve ROLE`"
                found.append((workload, container, args[1]))
    return found


def container_port(container: dict, port: int | str) -> int | None:
    for p in container.get("ports", []):
        if port in (p["containerPort"], p.get("name")):
            return p["containerPort"]
    return None


def flag(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def env_of(container: dict) -> dict[str, str | dict]:
    """The container's environment: envFrom ConfigMaps, then env (values or valueFrom dicts)."""
    env: dict[str, str | dict] = {}
    for source in container.get("envFrom", []):
        env.update(get("ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", item.get("valueFrom"))
    return env


def service_for_host(host: str) -> dict:
    """The Service a DNS name in this namespace resolves to."""
    name = host.split(".")[0]
    assert host in (name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc", f"{name}.{NAMESPACE}.svc.cluster.local"), host
    return get("Service", name)


def backing_container(service: dict, port: int) -> tuple[dict, int]:
    """The container behind `service`:`port` and the container port the traffic reaches."""
    name = service["metadata"]["name"]
    specs = [p for p in service["spec"]["ports"] if p["port"] == port]
    assert len(specs) == 1, f"Service {name} has no port {port}"
    target = specs[0].get("targetPort", port)
    workloads = selected_workloads(service)
    assert len(workloads) == 1, f"Service {name} selects {len(workloads)} workloads"
    for container in containers(workloads[0]):
        number = container_port(container, target)
        if number is not None:
            return container, number
    raise AssertionError(f"no container behind Service {name} has port {target}")


def selected_workloads(service: dict) -> list[dict]:
    selector = service["spec"]["selector"].items()
    return [w for w in of_kind(*WORKLOADS) if selector <= w["spec"]["template"]["metadata"]["labels"].items()]


def config_file(configmap: str, key: str) -> dict:
    return yaml.safe_load(get("ConfigMap", configmap)["data"][key])


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])
