#!/usr/bin/env bash
# Starts a throwaway PostgreSQL with snowflake preloaded (own port and socket directory, run as
# the postgres user), shows the extension at work, and stops the server again.
set -euo pipefail
PG_CONFIG=${PG_CONFIG:?run it as make demo (PG_MAJOR=NN)}
BIN=$("$PG_CONFIG" --bindir)
DIR=$(mktemp -d /tmp/snowflake-demo.XXXXXX)
PORT=${DEMO_PORT:-54329}
run() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
cleanup() { run "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT

run "$BIN/initdb" -D "$DIR/data" -A trust -U postgres --no-sync >/dev/null
cat >> "$DIR/data/postgresql.conf" <<CONF
shared_preload_libraries = 'snowflake'
snowflake.datacenter_id = 1
snowflake.worker_id = 7
port = $PORT
unix_socket_directories = '$DIR'
listen_addresses = ''
CONF
run "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
echo "== a throwaway $("$BIN/postgres" --version | sed "s/^postgres //") on socket $DIR, port $PORT, datacenter 1, worker 7"

"$BIN/psql" -X -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -e <<'SQL'
CREATE EXTENSION snowflake;
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), item text NOT NULL);
INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 5) g;
SELECT id, item FROM orders ORDER BY id;
SELECT o.id, d.* FROM orders o, snowflake_decode(o.id) d ORDER BY o.id;
-- A time range on the primary key: the last minute's orders.
EXPLAIN (COSTS OFF) SELECT * FROM orders WHERE id >= snowflake_min_id(now() - interval '1 minute');
SELECT count(*) AS orders_last_minute FROM orders WHERE id >= snowflake_min_id(now() - interval '1 minute');
-- This server's identity, the generator's position and its counters.
SELECT datacenter_id, worker_id, epoch, last_timestamp, lead_ms, lease_until FROM snowflake_node();
SELECT ids_issued, borrowed_ms, clock_back_events, errors FROM snowflake_stats();
-- IDs as text for JSON clients (numbers above 2^53 lose precision in JavaScript).
SELECT json_build_object('id_str', id::text, 'item', item) FROM orders ORDER BY id LIMIT 1;
SQL
echo "== done; the server is stopped and its directory removed"
