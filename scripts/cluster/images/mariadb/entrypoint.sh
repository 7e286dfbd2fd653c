#!/bin/sh
# The official mysql image's start-up for an empty data directory with MYSQL_ALLOW_EMPTY_PASSWORD
# (the only mode KFP's manifests use): the system tables, then root reachable from any host with
# no password. Arguments go to the server after Debian's configuration.
set -eu
datadir=/var/lib/mysql
case "${MYSQL_ALLOW_EMPTY_PASSWORD:-}" in
  true | yes | 1) ;;
  *)
    echo "mysql-entrypoint: only MYSQL_ALLOW_EMPTY_PASSWORD=true is supported here (KFP's manifests set it)" >&2
    exit 1
    ;;
esac
if [ ! -d "$datadir/mysql" ]; then
  mariadb-install-db --datadir="$datadir" --skip-test-db --skip-name-resolve --auth-root-authentication-method=normal >/dev/null
  echo "mysql-entrypoint: initialized $datadir"
fi
# Run at every start (idempotent): root from any host, as the official image makes it.
init=$(mktemp)
cat >"$init" <<'SQL'
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
SQL
exec mariadbd --init-file="$init" "$@"
