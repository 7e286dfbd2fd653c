"""What the API server does to a pod's resources before it exists, re-implemented for the few
rules the chart and overlays meet:

1. Pod defaulting (kubernetes/kubernetes pkg/apis/core/v1/defaults.go, SetDefaults_Pod): a
   container with a limit but no request for a resource gets request = limit.
2. LimitRanger admission (kubernetes/kubernetes plugin/pkg/admission/limitranger/admission.go,
   defaultContainerResourceRequirements / mergeContainerResources / PodValidateLimitFunc): for
   each `type: Container` item, a missing request is set from `defaultRequest` and a missing limit
   from `default` (only what the container leaves unset); then `min` <= request, limit <= `max`,
   and a resource with `max` must have a limit.
3. Validation (pkg/apis/core/validation, ValidateResourceRequirements): request <= limit for
   every resource with both.
4. ResourceQuota (pkg/quota/v1/evaluator/core/pods.go): requests.* / limits.* / pods summed over
   the pods must stay within `hard`; a quota on limits.X rejects a pod whose containers do not all
   set a limit for X.
"""

from __future__ import annotations

import copy

from kubernetes.utils import parse_quantity


class Rejected(Exception):
    pass


def admit_container(container: dict, limit_ranges: list[dict]) -> dict:
    """The container after defaulting and LimitRanger; raises Rejected as the API server would."""
    c = copy.deepcopy(container)
    res = c.setdefault("resources", {})
    requests, limits = res.setdefault("requests", {}), res.setdefault("limits", {})
    for item in (i for lr in limit_ranges for i in lr["spec"]["limits"] if i["type"] == "Container"):
        for name, value in (item.get("defaultRequest") or {}).items():
            if name not in requests and name not in limits:
                requests[name] = value
        for name, value in (item.get("default") or {}).items():
            limits.setdefault(name, value)
    for name, value in limits.items():  # SetDefaults_Pod (runs first upstream; same outcome here)
        requests.setdefault(name, value)
    for item in (i for lr in limit_ranges for i in lr["spec"]["limits"] if i["type"] == "Container"):
        for name, low in (item.get("min") or {}).items():
            if name in requests and parse_quantity(requests[name]) < parse_quantity(low):
                raise Rejected(f"{c['name']}: {name} request {requests[name]} below min {low}")
        for name, high in (item.get("max") or {}).items():
            if name not in limits:
                raise Rejected(f"{c['name']}: {name} has a max ({high}) but no limit")
            if parse_quantity(limits[name]) > parse_quantity(high):
                raise Rejected(f"{c['name']}: {name} limit {limits[name]} above max {high}")
    for name in set(requests) & set(limits):
        if parse_quantity(requests[name]) > parse_quantity(limits[name]):
            raise Rejected(
                f"{c['name']}: Invalid value: {requests[name]}: "
                f"must be less than or equal to {name} limit {limits[name]}"
            )
    return c


def admit_pod(spec: dict, limit_ranges: list[dict]) -> dict:
    out = copy.deepcopy(spec)
    out["containers"] = [admit_container(c, limit_ranges) for c in spec["containers"]]
    out["initContainers"] = [admit_container(c, limit_ranges) for c in spec.get("initContainers", [])]
    return out


def pod_usage(spec: dict) -> dict[str, float]:
    """Quota usage of one admitted pod: containers summed (init containers: their max)."""
    usage: dict[str, float] = {"pods": 1}
    for kind in ("requests", "limits"):
        names = {n for c in spec["containers"] + spec["initContainers"] for n in c["resources"].get(kind, {})}
        for name in names:
            total = sum(float(parse_quantity(c["resources"][kind].get(name, "0"))) for c in spec["containers"])
            init = max(
                (float(parse_quantity(c["resources"][kind].get(name, "0"))) for c in spec["initContainers"]), default=0
            )
            usage[f"{kind}.{name}"] = max(total, init)
    return usage


def in_scope(spec: dict, quota: dict) -> bool:
    """Whether a quota's scopeSelector selects the pod (PriorityClass In / NotIn / Exists /
    DoesNotExist: kubernetes/kubernetes pkg/quota/v1/evaluator/core/pods.go podMatchesScopeFunc)."""
    for expr in (quota["spec"].get("scopeSelector") or {}).get("matchExpressions", []):
        if expr["scopeName"] != "PriorityClass":
            raise ValueError(f"scope {expr['scopeName']}: not modelled")
        name, op = spec.get("priorityClassName"), expr["operator"]
        ok = {
            "In": name in expr.get("values", []),
            "NotIn": name not in expr.get("values", []),
            "Exists": name is not None,
            "DoesNotExist": name is None,
        }[op]
        if not ok:
            return False
    return True


def quota_admits(pods: list[dict], quota: dict) -> list[str]:
    """Why the pods together exceed the quota (empty when admitted); pods outside its scope count nothing."""
    problems = []
    pods = [p for p in pods if in_scope(p, quota)]
    hard = quota["spec"]["hard"]
    for key in hard:
        if key.startswith("limits."):
            name = key.split(".", 1)[1]
            for spec in pods:
                for c in spec["containers"]:
                    if name not in c["resources"].get("limits", {}):
                        problems.append(f"{c['name']}: no {name} limit under a quota on {key}")
    totals: dict[str, float] = {}
    for spec in pods:
        for key, value in pod_usage(spec).items():
            totals[key] = totals.get(key, 0) + value
    for key, limit in hard.items():
        if key.startswith("count/"):
            continue
        used = totals.get(key, 0)
        if used > float(parse_quantity(limit)):
            problems.append(f"{key}: {used:g} > {limit}")
    return problems


def pod_templates(objs: list[dict]) -> dict[str, dict]:
    out = {}
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            out[name] = o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            out[name] = o["spec"]
        elif o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime"):
            for rj in o["spec"]["template"]["spec"]["replicatedJobs"]:
                out[f"{name}/{rj['name']}"] = rj["template"]["spec"]["template"]["spec"]
    return out
