"""A small NetworkPolicy evaluator: whether a connection from one pod to a pod or an address is
allowed by a set of rendered `networking.k8s.io/v1` NetworkPolicies.

It follows the semantics of the API's own documentation (kubernetes/api
networking/v1/types.go, NetworkPolicySpec / NetworkPolicyPeer / NetworkPolicyPort): a pod is
isolated for a direction when any policy in its namespace selects it with that policy type; an
isolated pod admits a connection when at least one rule of a selecting policy matches both the
peer and the port; rules are additive; `to`/`from` absent or empty matches every peer; `ports`
absent or empty matches every port; a peer with only podSelector means the policy's namespace, one
with namespaceSelector (and optionally podSelector) means pods of the namespaces it selects; an
ipBlock matches addresses (here: destinations given as an IP, never pod IPs) outside its `except`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


@dataclass(frozen=True)
class Address:
    ip: str


def selector_matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) ANDed."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def peer_matches(peer: dict, policy_ns: str, other: Pod | Address) -> bool:
    if "ipBlock" in peer:
        if not isinstance(other, Address):
            return False
        ip = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], other.ns_labels()):
            return False
    elif other.namespace != policy_ns:
        return False
    return "podSelector" not in peer or selector_matches(peer["podSelector"], other.labels)


def port_matches(ports: list[dict] | None, protocol: str, port: int) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        low = p["port"]
        if isinstance(low, str):
            raise TypeError(f"named port {low!r}: the evaluator needs numbers")
        if low <= port <= p.get("endPort", low):
            return True
    return False


def _direction_allows(policies: list[dict], pod: Pod, other: Pod | Address, protocol: str, port: int, kind: str):
    key, peers_key = ("egress", "to") if kind == "Egress" else ("ingress", "from")
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace", pod.namespace) == pod.namespace
        and selector_matches(p["spec"]["podSelector"], pod.labels)
        and kind in p["spec"].get("policyTypes", ["Ingress", *(["Egress"] if p["spec"].get("egress") else [])])
    ]
    if not selecting:
        return True  # not isolated in this direction
    for policy in selecting:
        ns = policy["metadata"].get("namespace", pod.namespace)
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key) or []
            if (not peers or any(peer_matches(peer, ns, other) for peer in peers)) and port_matches(
                rule.get("ports"), protocol, port
            ):
                return True
    return False


def allowed(policies: list[dict], source: Pod, destination: Pod | Address, port: int, protocol: str = "TCP") -> bool:
    """Egress of the source and, for a pod destination, ingress of the destination."""
    if not _direction_allows(policies, source, destination, protocol, port, "Egress"):
        return False
    if isinstance(destination, Pod):
        return _direction_allows(policies, destination, source, protocol, port, "Ingress")
    return True
