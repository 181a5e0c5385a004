#!/usr/bin/env bash
# pg_cluster.sh start|stop|halt|resume STATE_DIR
#   start: a throwaway PostgreSQL cluster (Debian's initdb and pg_ctl) in a temporary directory on a free local port,
#          run as the `postgres` user when called as root (PostgreSQL refuses root). Writes STATE_DIR/url
#          (postgresql://...) once the server accepts connections. Without PostgreSQL it writes STATE_DIR/skip with
#          the reason and exits 0, so the tests that read the URL skip and say why.
#          PG_CLUSTER_NET=10.a.b also lets hosts of 10.a.b.0/24 in (every address is listened on; trust for that net
#          alone): nodes in network namespaces reach it at the bridge's address.
#   stop:  stops that cluster and removes its directory.
#   halt, resume: stops the server and starts it again on the same port with the same data (a database that goes
#          away and comes back).
set -u
cmd=${1:-} state=${2:-}
if [ -z "$cmd" ] || [ -z "$state" ]; then
  echo "usage: $0 start|stop STATE_DIR" >&2
  exit 2
fi
mkdir -p "$state"

# The server outlives this script: it must hold no descriptor its caller passed down, such as the lock file of a
# `flock FILE ctest ...` (the lock would stay held for as long as a server left running runs).
for fd in "/proc/$$/fd"/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-"; fi
done

# The newest installed PostgreSQL's bin/ ("" when none).
pg_bin() {
  find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1
}

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
  rm -f "$state/url" "$state/skip" "$state/datadir"
  bin=$(pg_bin)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "PostgreSQL is not installed (apt-get install postgresql)" | tee "$state/skip"
    exit 0
  fi
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "running as root and there is no postgres user to run the server as" | tee "$state/skip"
    exit 0
  fi
  dir=$(mktemp -d /tmp/peerlab-pg.XXXXXX)
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  echo "$dir" > "$state/datadir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$state/initdb.log" 2>&1; then
    echo "initdb failed: $(tail -n 3 "$state/initdb.log" | tr '\n' ' ')" | tee "$state/skip"
    exit 0
  fi
  listen=127.0.0.1
  if [ -n "${PG_CLUSTER_NET:-}" ]; then
    listen='*'
    echo "host all all ${PG_CLUSTER_NET}.0/24 trust" >>"$dir/data/pg_hba.conf"
  fi
  echo "-p $port -k $dir -c listen_addresses=$listen -c fsync=off -c max_connections=200" >"$state/options"
  if ! as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(cat "$state/options")" start \
      >"$state/pg_ctl.log" 2>&1; then
    echo "pg_ctl start failed: $(tail -n 3 "$dir/server.log" 2>/dev/null | tr '\n' ' ')" | tee "$state/skip"
    exit 0
  fi
  echo "postgresql://postgres@127.0.0.1:$port/postgres" > "$state/url"
  echo "PostgreSQL $(basename "$(dirname "$bin")") on port $port, data in $dir"
  ;;
halt | resume)
  if [ ! -f "$state/datadir" ] || [ ! -f "$state/url" ]; then
    echo "no cluster in $state" >&2
    exit 1
  fi
  dir=$(cat "$state/datadir")
  bin=$(pg_bin)
  if [ "$cmd" = halt ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
  else
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$(cat "$state/options")" start >/dev/null
  fi
  ;;
stop)
  if [ -f "$state/datadir" ]; then
    dir=$(cat "$state/datadir")
    bin=$(pg_bin)
    if [ -n "$bin" ] && [ -d "$dir/data" ]; then
      as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
  fi
  rm -f "$state/url" "$state/skip" "$state/datadir" "$state/options"
  echo "stopped"
  ;;
*)
  echo "usage: $0 start|stop|halt|resume STATE_DIR" >&2
  exit 2
  ;;
esac
