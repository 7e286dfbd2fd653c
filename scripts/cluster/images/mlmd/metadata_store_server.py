#!/opt/mlmd/bin/python
"""ML Metadata's gRPC server for the test cluster: the store of PyPI's `ml-metadata` wheel (the same
C++ library upstream's `metadata_store_server` links) behind the wheel's generated
`MetadataStoreService`.

Each call's serialized request goes unchanged to the extension function of the same name
(`fn(store, request) -> [response, error, code]`), and its status code (absl's, which are gRPC's)
comes back as the call's status: no message is parsed or rebuilt here. The flags are the ones
KFP's `metadata-grpc-deployment` passes to upstream's binary. Calls are served one at a time: the
store holds one database connection."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc
from ml_metadata.metadata_store.pywrap.metadata_store_extension import metadata_store as extension
from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

SERVICE = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]


def connection_config(args: argparse.Namespace) -> metadata_store_pb2.ConnectionConfig:
    config = metadata_store_pb2.ConnectionConfig()
    if args.mysql_config_host:  # upstream's binary: MySQL when its host is given
        mysql = config.mysql
        mysql.host, mysql.port = args.mysql_config_host, int(args.mysql_config_port)
        mysql.database = args.mysql_config_database
        mysql.user, mysql.password = args.mysql_config_user, args.mysql_config_password
    elif args.metadata_source_config_type == "postgresql":
        pg = config.postgresql
        pg.host, pg.port = args.postgres_config_host, str(args.postgres_config_port)
        pg.dbname = args.postgres_config_dbname
        pg.user, pg.password = args.postgres_config_user, args.postgres_config_password
        pg.skip_db_creation = args.postgres_config_skip_db_creation
    else:
        config.sqlite.filename_uri = args.sqlite_filename_uri
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return config


def handlers(store, lock: threading.Lock) -> tuple[grpc.GenericRpcHandler, list[str]]:
    served, missing = {}, []
    for method in SERVICE.methods:
        function = getattr(extension, method.name, None)
        if function is None:
            missing.append(method.name)
            continue

        def call(request: bytes, context: grpc.ServicerContext, function=function) -> bytes:
            with lock:
                response, error, code = function(store, request)
            if code != 0:
                context.abort(grpc.StatusCode[_CODES.get(code, "UNKNOWN")], error.decode("utf-8", "replace"))
            return response

        # No (de)serializers: the bytes on the wire are what the extension takes and gives.
        served[method.name] = grpc.unary_unary_rpc_method_handler(call)
    return grpc.method_handlers_generic_handler(SERVICE.full_name, served), missing


def channel_argument(item: str) -> tuple[str, int | str]:
    name, _, value = item.partition("=")
    return name, int(value) if value.lstrip("-").isdigit() else value


_CODES = {code.value[0]: code.name for code in grpc.StatusCode}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpc_port", type=int, default=8080)
    parser.add_argument("--metadata_source_config_type", choices=("postgresql", "sqlite"), default="sqlite")
    parser.add_argument("--postgres_config_host", default="localhost")
    parser.add_argument("--postgres_config_port", default="5432")
    parser.add_argument("--postgres_config_dbname", default="metadb")
    parser.add_argument("--postgres_config_user", default="root")
    parser.add_argument("--postgres_config_password", default="")
    parser.add_argument("--postgres_config_skip_db_creation", type=lambda v: v.lower() == "true", default=False)
    parser.add_argument("--mysql_config_host", default="")
    parser.add_argument("--mysql_config_port", default="3306")
    parser.add_argument("--mysql_config_database", default="metadb")
    parser.add_argument("--mysql_config_user", default="root")
    parser.add_argument("--mysql_config_password", default="")
    # gRPC channel options as upstream's flag gives them: name=value,...
    parser.add_argument("--grpc_channel_arguments", default="")
    parser.add_argument("--sqlite_filename_uri", default="/tmp/mlmd.sqlite")
    parser.add_argument("--enable_database_upgrade", type=lambda v: v.lower() == "true", default=False)
    args = parser.parse_args(argv)

    migration = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=args.enable_database_upgrade)
    store = extension.CreateMetadataStore(connection_config(args).SerializeToString(), migration.SerializeToString())
    handler, missing = handlers(store, threading.Lock())
    options = [channel_argument(item) for item in args.grpc_channel_arguments.split(",") if item]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"[::]:{args.grpc_port}")
    server.start()
    source = "mysql" if args.mysql_config_host else args.metadata_source_config_type
    print(
        f"metadata store ({source}) serving {SERVICE.full_name} on :{args.grpc_port};"
        f" not in this store's library: {', '.join(missing) or 'none'}",
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
