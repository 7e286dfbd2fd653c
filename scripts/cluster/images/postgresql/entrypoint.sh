#!/bin/sh
# The official postgres image's start-up for an empty PGDATA (initdb with POSTGRES_USER as the
# superuser and POSTGRES_PASSWORD, then POSTGRES_DB created), then the server on every address.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if ! id -un >/dev/null 2>&1; then
  # A uid with no passwd entry (the chart runs it as 10001): initdb and postgres look the user up,
  # so give them one through nss_wrapper, as the official image does.
  NSS_WRAPPER_PASSWD=$(mktemp) NSS_WRAPPER_GROUP=$(mktemp)
  printf 'postgres:x:%s:%s:PostgreSQL:%s:/bin/false\n' "$(id -u)" "$(id -g)" "${PGDATA%/*}" >"$NSS_WRAPPER_PASSWD"
  printf 'postgres:x:%s:\n' "$(id -g)" >"$NSS_WRAPPER_GROUP"
  export NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libnss_wrapper.so
fi
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "postgres-entrypoint: POSTGRES_PASSWORD is empty: set it (the server accepts passwords only)" >&2
  exit 1
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA" && chmod 700 "$PGDATA"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  # UTF-8, as the official image (its LANG): pgx refuses another client encoding.
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-host=scram-sha-256 --auth-local=trust \
    --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  echo "postgres-entrypoint: initialized $PGDATA (superuser $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec postgres -c listen_addresses='*' "$@"
