#!/usr/bin/env bash
# Starts nginx with its WebDAV module as an HTTP cache server for progcache on
# 127.0.0.1:PORT, keeping its files, configuration and logs under DIR, and
# prints its pid (stop it with kill). The configuration is the one
# docs/remote.md shows; entries are the files DIR/data/<prefix>/ac/<key>.
#
#   bash scripts/http_cache_server.sh DIR PORT
#   PROGCACHE_REMOTE=http://127.0.0.1:PORT/progcache ...
set -euo pipefail
dir=$(mkdir -p "$1" && cd "$1" && pwd)
port="$2"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
mkdir -p "$dir/data" "$dir/tmp"
cat > "$dir/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
error_log $dir/error.log;
pid $dir/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_max_body_size 0;
  keepalive_requests 100000;
  client_body_temp_path $dir/tmp;
  proxy_temp_path $dir/tmp;
  fastcgi_temp_path $dir/tmp;
  uwsgi_temp_path $dir/tmp;
  scgi_temp_path $dir/tmp;
  server {
    listen 127.0.0.1:$port;
    root $dir/data;
    location / {
      dav_methods PUT DELETE;
      create_full_put_path on;
    }
  }
}
CONF
"$nginx" -p "$dir" -c "$dir/nginx.conf" </dev/null >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "$pid"
    exit 0
  fi
  sleep 0.05
done
echo "http_cache_server.sh: nginx did not start; see $dir/error.log" >&2
kill "$pid" 2>/dev/null || true
exit 1
