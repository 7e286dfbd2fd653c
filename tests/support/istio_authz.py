"""A small Istio AuthorizationPolicy evaluator (ALLOW policies, sidecar mode): whether a request
from a pod reaches a workload, after the semantics of istio/api security/v1/authorization_policy.proto
and Istio's "Authorization Policy" reference: a workload without a sidecar enforces nothing; with
one, when any ALLOW policy selects it (same namespace, selector matching its labels or absent;
or the root namespace istio-system without selector) the request needs one matching rule; a rule
matches when its `from`, `to` and `when` all match (each absent: matches); `from` principals and
namespaces and the `source.namespace` condition need a peer identity, which only mTLS from a
sidecar carries (a pod without one sends plaintext: no identity)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    source_namespace: str | None  # None: plaintext from a pod without a sidecar (no identity)
    source_account: str | None = None
    port: int = 80
    path: str = "/"
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def principal(self) -> str | None:
        if self.source_namespace is None:
            return None
        return f"cluster.local/ns/{self.source_namespace}/sa/{self.source_account or 'default'}"


def _match(pattern: str, value: str | None) -> bool:
    if value is None:
        return False
    if pattern == "*":
        return True
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    if pattern.startswith("*"):
        return value.endswith(pattern[1:])
    return pattern == value


def _any(patterns, value) -> bool:
    return any(_match(str(p), value) for p in patterns)


def _source_matches(source: dict, req: Request) -> bool:
    if "principals" in source and not _any(source["principals"], req.principal):
        return False
    if "namespaces" in source and not _any(source["namespaces"], req.source_namespace):
        return False
    return True


def _operation_matches(op: dict, req: Request) -> bool:
    if "ports" in op and str(req.port) not in [str(p) for p in op["ports"]]:
        return False
    if "paths" in op and not _any(op["paths"], req.path):
        return False
    if "methods" in op and not _any(op["methods"], req.method):
        return False
    return True


def _condition_value(key: str, req: Request) -> str | None:
    if key == "source.namespace":
        return req.source_namespace
    if key.startswith("request.headers[") and key.endswith("]"):
        return req.headers.get(key[len("request.headers[") : -1].lower())
    raise ValueError(f"condition key {key!r}: not modelled")


def _rule_matches(rule: dict, req: Request) -> bool:
    if "from" in rule and not any(_source_matches(f.get("source", {}), req) for f in rule["from"]):
        return False
    if "to" in rule and not any(_operation_matches(t.get("operation", {}), req) for t in rule["to"]):
        return False
    return all(_any(c.get("values", []), _condition_value(c["key"], req)) for c in rule.get("when", []))


def allowed(policies: list[dict], namespace: str, labels: dict[str, str], sidecar: bool, req: Request) -> bool:
    if not sidecar:
        return True
    applying = []
    for p in policies:
        ns, spec = p["metadata"]["namespace"], p.get("spec") or {}
        if spec.get("action", "ALLOW") != "ALLOW":
            raise ValueError(f"{p['metadata']['name']}: only ALLOW policies are modelled")
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if (ns == namespace or (ns == "istio-system" and not selector)) and all(
            labels.get(k) == v for k, v in selector.items()
        ):
            applying.append(spec)
    if not applying:
        return True
    return any(_rule_matches(rule, req) for spec in applying for rule in spec.get("rules") or [])
