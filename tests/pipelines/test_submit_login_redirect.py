"""`invfold submit` through Kubeflow's gateway without an accepted token: the gateway (oauth2-proxy
in front of Dex, kubeflow/manifests common/oauth2-proxy) answers with a 302 to the login page;
kfp 2.17's client follows it, reads the HTML as an empty answer and returns a run without an id
(measured here before the fix: `{'run_id': None, ...}`, exit 0). The submit must fail with one line
that names the login page and the ways in. The gateway is a stand-in: a local server answering
every API path with that redirect, and the login path with an HTML page."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from invfold.pipelines.compile import SubmitError, submit


class Gateway(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/dex/"):
            body = b"<!DOCTYPE html><html><head><title>Log in</title></head><body>Log in to Kubeflow</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(302)
        self.send_header("Location", "/dex/auth?client_id=kubeflow-oidc-authservice&response_type=code")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET


@pytest.fixture
def gateway():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/pipeline"
    server.shutdown()


def test_a_login_redirect_is_a_clear_error_not_a_run_without_id(gateway):
    with pytest.raises(SubmitError, match=r"login page.*--token or KFP_TOKEN.*port-forward svc/ml-pipeline"):
        submit(
            gateway, {"data_uri": "s3://bucket/chain_set.jsonl"}, namespace="team-a", registry="registry.acme.example/invfold"
        )
