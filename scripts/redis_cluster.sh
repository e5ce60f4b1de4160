#!/usr/bin/env bash
# Starts a Redis Cluster on loopback for trying progcache's cluster tier and
# for its benchmark: three primaries and three replicas on ports PORT to
# PORT+5 (and their cluster bus ports, PORT+10000 up), each keeping its files
# under DIR/<port>. Prints the URL to give progcache. Stop it with
#   redis-cli -p P shutdown nosave   (for each of the six ports)
#
#   bash scripts/redis_cluster.sh DIR PORT
#   PROGCACHE_REMOTE=redis+cluster://127.0.0.1:PORT,127.0.0.1:PORT+1 ...
set -euo pipefail
dir=$(mkdir -p "$1" && cd "$1" && pwd)
base="$2"
nodes=()
for i in 0 1 2 3 4 5; do
  port=$((base + i))
  mkdir -p "$dir/$port"
  (cd "$dir/$port" && redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file nodes.conf --cluster-node-timeout 2000 --save '' --appendonly no \
    --repl-diskless-sync-delay 0 --daemonize yes --logfile "$dir/$port/log")
  nodes+=("127.0.0.1:$port")
done
for i in 0 1 2 3 4 5; do
  until redis-cli -p $((base + i)) ping >/dev/null 2>&1; do sleep 0.1; done
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
until redis-cli -p "$base" cluster info | grep -q cluster_state:ok; do sleep 0.1; done
echo "redis+cluster://127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
