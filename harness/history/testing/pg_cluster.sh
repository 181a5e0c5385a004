#!/usr/bin/env bash
# pg_cluster.sh start|stop|halt|resume STATE_DIR
#   start: a throwaway PostgreSQL cluster (Debian's initdb and pg_ctl) in a temporary directory on a free local port,
#          run as the `postgres` user when called as root (PostgreSQL refuses root). Writes STATE_DIR/url
#          (postgresql://...) once the server accepts connections. Without PostgreSQL it writes STATE_DIR/skip with
#          the reason and exits 0, so the tests that read the URL skip and say why.
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
  if ! as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100" start \
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
  port=$(sed -n 's|.*:\([0-9]*\)/.*|\1|p' "$state/url")
  if [ "$cmd" = halt ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
  else
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100" start >/dev/null
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
  rm -f "$state/url" "$state/skip" "$state/datadir"
  echo "stopped"
  ;;
*)
  echo "usage: $0 start|stop|halt|resume STATE_DIR" >&2
  exit 2
  ;;
esac
