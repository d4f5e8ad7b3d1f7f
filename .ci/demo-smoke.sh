#!/usr/bin/env bash
# Runs the README's first command (`pnpm start`) the way a new user does, checks the demo answers an
# order flow, streams it, exposes metrics, and that Ctrl+C (SIGINT to the process group) leaves no
# process behind.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${DEMO_SMOKE_PORT:-3917}
LOG=$(mktemp)
cleanup() {
  [ -n "${PGID:-}" ] && kill -KILL -"$PGID" 2>/dev/null || true
  rm -f "$LOG" "$LOG.feed"
}
trap cleanup EXIT

setsid env PORT="$PORT" pnpm start >"$LOG" 2>&1 &
PGID=$!
for _ in $(seq 1 120); do grep -q "Sluice demo shop is running" "$LOG" && break; sleep 0.5; done
grep -q "Sluice demo shop is running" "$LOG" || { cat "$LOG"; echo "demo did not start" >&2; exit 1; }
BASE="http://127.0.0.1:$PORT"

curl -sfN "$BASE/feed" >"$LOG.feed" &
FEED=$!
sleep 0.5
ORDER=$(curl -sf -X POST "$BASE/orders" -H 'content-type: application/json' \
  -d '{"customer":"smoke@example.com","items":[{"sku":"TEA-1","quantity":2,"priceCents":450}]}')
ID=$(node -e 'process.stdout.write(JSON.parse(process.argv[1]).id)' "$ORDER")
curl -sf -X POST "$BASE/orders/$ID/pay" >/dev/null
for _ in $(seq 1 50); do
  curl -sf "$BASE/stats" | grep -q '"paid":[1-9]' && break
  sleep 0.2
done
curl -sf "$BASE/stats" | grep -q '"paid":[1-9]' || { echo "/stats did not change" >&2; exit 1; }
grep -q "event: OrderPaid" "$LOG.feed" || { sleep 1; grep -q "event: OrderPaid" "$LOG.feed"; } || { echo "/feed streamed nothing" >&2; exit 1; }
kill "$FEED" 2>/dev/null || true
curl -sf "$BASE/metrics" | grep -q '^sluice_events_processed_total' || { echo "/metrics has no Sluice metrics" >&2; exit 1; }
echo "demo smoke: order $ID placed and paid; /stats, /feed and /metrics answered"

kill -INT -"$PGID"
for _ in $(seq 1 40); do pgrep -g "$PGID" >/dev/null || break; sleep 0.25; done
if pgrep -g "$PGID" >/dev/null || pgrep -f "postgres -D .*\.data/postgres" >/dev/null; then
  echo "processes left after Ctrl+C:" >&2; pgrep -af "postgres -D|server.ts" >&2 || true; exit 1
fi
PGID=
echo "demo smoke: Ctrl+C left no process behind"
