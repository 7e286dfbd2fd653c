"""Patterns of literal credentials that must never appear in generated manifests or the
compiled pipeline."""

import re

CREDENTIAL_PATTERNS = [
    re.compile(p, re.I)
    for p in (
        r"AKIA[0-9A-Z]{16}",  # AWS access key id
        r"aws_secret_access_key\W*[:=]\W*[A-Za-z0-9/+]{20,}",  # AWS secret as a value
        r"password\W*[:=]\W*\S+",  # any password given as a value
        r"\bgh[pousr]_[0-9A-Za-z]{30,}",  # GitHub tokens
        r"bearer\s+[0-9a-z._-]{20,}",  # bearer tokens
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",  # keys
        r"eyJ[0-9A-Za-z_-]{10,}\.[0-9A-Za-z_-]{10,}",  # JWTs (service-account tokens)
        r"://[^/\s:@]+:[^/\s@]+@",  # user:password@host in a URI
    )
]


def literal_credentials(text: str) -> list[str]:
    return [p.pattern for p in CREDENTIAL_PATTERNS if p.search(text)]
