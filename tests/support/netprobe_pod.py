"""Runs inside the probe pods of tests/cluster/test_network_policies.py (the standard library only;
sent as `python3 -c` source, so it imports nothing of the project).

    listen [PORT | PORT/udp]...   accept TCP connections on each port, echo UDP datagrams; then wait
    probe JSON                    JSON is [[host, port, "TCP" | "UDP"], ...]: try each once, print a
                                  JSON list of "open" | "refused" | "timeout" | "<error>"

A TCP probe is open when the handshake completes. A UDP probe sends a DNS query (an A record of
kubernetes.default.svc.cluster.local) and is open when a datagram with the query's id comes back:
the cluster's DNS answers it and the echo listener returns it."""

import concurrent.futures
import json
import socket
import sys
import threading

TIMEOUT = 3.0
QUERY_ID = b"\x1f\x2e"
DNS_QUERY = (
    QUERY_ID
    + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    + b"".join(bytes([len(p)]) + p.encode() for p in "kubernetes.default.svc.cluster.local".split("."))
    + b"\x00\x00\x01\x00\x01"
)


def serve_tcp(port: int) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(64)
    while True:
        conn, _ = server.accept()
        conn.close()


def serve_udp(port: int) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("0.0.0.0", port))
    while True:
        data, peer = server.recvfrom(2048)
        server.sendto(data, peer)


def listen(specs: list[str]) -> None:
    threads = []
    for spec in specs:
        port, _, proto = spec.partition("/")
        serve = serve_udp if proto == "udp" else serve_tcp
        threads.append(threading.Thread(target=serve, args=(int(port),), daemon=True))
    for thread in threads:
        thread.start()
    print(f"listening on {' '.join(specs) or 'nothing'}", flush=True)
    threading.Event().wait()


def probe_one(host: str, port: int, proto: str) -> str:
    try:
        if proto == "TCP":
            socket.create_connection((host, port), timeout=TIMEOUT).close()
            return "open"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(TIMEOUT)
            sock.connect((host, port))
            sock.send(DNS_QUERY)
            return "open" if sock.recv(4096)[:2] == QUERY_ID else "wrong reply"
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as err:
        return f"{type(err).__name__}: {err}"


def probe(targets: list[list]) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda t: probe_one(*t), targets))
    print(json.dumps(results))


if __name__ == "__main__":
    if sys.argv[1] == "listen":
        listen(sys.argv[2:])
    else:
        probe(json.loads(sys.argv[2]))
