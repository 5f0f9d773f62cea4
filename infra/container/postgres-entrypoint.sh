#!/bin/sh
# PostgreSQL 15 in the ragstream-postgres image: initdb once on the volume (user ragstream,
# UTF8, C.UTF-8, as infra/postgres_service.py does), the ragstream.conf include infra/ writes,
# password auth over TCP when POSTGRES_PASSWORD is set (trust inside the container otherwise),
# and the database ragstream created once.
set -eu
bin=/usr/lib/postgresql/15/bin
export PGDATA=/var/lib/ragstream/postgres/data
mkdir -p "$PGDATA" /var/lib/ragstream/postgres/run
if [ ! -f "$PGDATA/PG_VERSION" ]; then
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    "$bin/initdb" -D "$PGDATA" -U ragstream -E UTF8 --locale=C.UTF-8 --auth-local=trust \
      --auth-host=scram-sha-256 --pwfile="$pwfile"
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  else
    "$bin/initdb" -D "$PGDATA" -U ragstream -E UTF8 --locale=C.UTF-8 --auth=trust
    echo "host all all all trust" >> "$PGDATA/pg_hba.conf"
  fi
  printf "\ninclude = 'ragstream.conf'\n" >> "$PGDATA/postgresql.conf"
  cp /etc/ragstream/postgres.conf "$PGDATA/ragstream.conf"
  echo 'CREATE DATABASE ragstream' | "$bin/postgres" --single -D "$PGDATA" postgres > /dev/null
fi
cp /etc/ragstream/postgres.conf "$PGDATA/ragstream.conf"
exec "$bin/postgres" -D "$PGDATA"
