from .server import mlflow_server, unreachable_uri  # noqa: F401 - fixtures
