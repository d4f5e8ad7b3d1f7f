#!/usr/bin/env bash
# Runs the README's first command (`pnpm start`) the way a new user does, checks the demo answers an
# order flow, streams it, exposes metrics, and that Ctrl+C (SIGINT to the process group) stops it
# cleanly: the app first, then PostgreSQL, exit code 0, no package-manager failure banner, no
# process left behind.
set -euo pipefail
# Job control: the background job gets a process group of its own and keeps SIGINT at its default,
# as a terminal's foreground job does (without it, bash starts background jobs ignoring SIGINT, and
# pnpm and its children would not react to Ctrl+C as they do for a user).
set -m
cd "$(dirname "$0")/.."
PORT=${DEMO_SMOKE_PORT:-3917}
LOG=$(mktemp)
cleanup() {
  [ -n "${PGID:-}" ] && kill -KILL -"$PGID" 2>/dev/null || true
  rm -f "$LOG" "$LOG.feed" "$LOG.metrics" "$LOG.openmetrics"
}
trap cleanup EXIT

env PORT="$PORT" pnpm start >"$LOG" 2>&1 &
PGID=$!
for _ in $(seq 1 120); do grep -q "Sluice demo shop is running" "$LOG" && break; sleep 0.5; done
grep -q "Sluice demo shop is running" "$LOG" || { cat "$LOG"; echo "demo did not start" >&2; exit 1; }
BASE="http://127.0.0.1:$PORT"
# The embedded cluster (in .data/postgres/cluster, or where that links to) and its postmaster.
CLUSTER=$(sed -n 's/.*(cluster in \(.*\))$/\1/p' "$LOG")
POSTMASTER=$(head -1 "$CLUSTER/postmaster.pid")
kill -0 "$POSTMASTER"

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
kill "$FEED" 2>/dev/null && wait "$FEED" 2>/dev/null || true
# Into a file first: with pipefail, grep -q leaving early would fail curl's write (SIGPIPE). curl
# asks for */*, which gets the Prometheus text format; Prometheus's own Accept gets OpenMetrics.
TEXT_TYPE=$(curl -sf -o "$LOG.metrics" -w '%{content_type}' "$BASE/metrics")
grep -q '^sluice_events_processed_total' "$LOG.metrics" || { echo "/metrics has no Sluice metrics" >&2; exit 1; }
grep -q '^sluice_handler_duration_seconds_bucket' "$LOG.metrics" || { echo "/metrics has no handler durations" >&2; exit 1; }
grep -q '^target_info{.*service_name="sluice-demo"' "$LOG.metrics" || { echo "/metrics has no service_name" >&2; exit 1; }
[ "$TEXT_TYPE" = 'text/plain; version=0.0.4; charset=utf-8' ] || { echo "/metrics Content-Type: $TEXT_TYPE" >&2; exit 1; }
OM_TYPE=$(curl -sf -o "$LOG.openmetrics" -w '%{content_type}' -H 'accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5' "$BASE/metrics")
[ "$OM_TYPE" = 'application/openmetrics-text; version=1.0.0; charset=utf-8' ] || { echo "OpenMetrics Content-Type: $OM_TYPE" >&2; exit 1; }
[ "$(tail -n 1 "$LOG.openmetrics")" = '# EOF' ] || { echo "the OpenMetrics exposition does not end with # EOF" >&2; exit 1; }
# Prometheus's own linter (Debian package prometheus; CI installs it and sets SLUICE_REQUIRE_PROMETHEUS).
if command -v promtool >/dev/null; then
  promtool check metrics <"$LOG.metrics" || { echo "promtool check metrics rejected /metrics" >&2; exit 1; }
  echo "demo smoke: promtool check metrics accepts /metrics"
elif [ -n "${SLUICE_REQUIRE_PROMETHEUS:-}" ]; then
  echo "demo smoke: promtool is not installed (Debian package prometheus)" >&2; exit 1
else
  echo "demo smoke: promtool not installed, /metrics not linted (apt-get install prometheus)"
fi
echo "demo smoke: order $ID placed and paid; /stats, /feed and /metrics answered"

# Ctrl+C: SIGINT to every process of the group, as a terminal sends it. The server log is appended
# to across starts: only what it writes from now on counts.
PG_LOG="$CLUSTER/sluice-server.log"
PG_LOG_FROM=$(($(stat -c %s "$PG_LOG") + 1))
kill -INT -"$PGID"
for _ in $(seq 1 120); do kill -0 "$PGID" 2>/dev/null || break; sleep 0.25; done
status=0
wait "$PGID" || status=$?
fail() { cat "$LOG"; echo "demo smoke: $1" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "pnpm start exited $status after Ctrl+C (expected 0)"
if grep -qE 'ERR_PNPM|ELIFECYCLE' "$LOG"; then fail "pnpm printed a failure banner after Ctrl+C"; fi
# In this order: the app stopped (handlers finished, pool closed), then PostgreSQL.
stopped=$(grep -n '^Sluice demo shop stopped\.$' "$LOG" | cut -d: -f1)
pg_stopped=$(grep -n '^PostgreSQL stopped\.$' "$LOG" | cut -d: -f1)
[ -n "$stopped" ] && [ -n "$pg_stopped" ] && [ "$stopped" -lt "$pg_stopped" ] ||
  fail "the stop lines are missing or out of order"
# PostgreSQL never had to cut a session off: the app had closed its pool when it was asked to stop.
tail -c +"$PG_LOG_FROM" "$PG_LOG" | grep -qE 'received (smart|fast) shutdown request' ||
  fail "PostgreSQL's log shows no shutdown"
if tail -c +"$PG_LOG_FROM" "$PG_LOG" | grep -q 'terminating connection due to administrator command'; then
  tail -c +"$PG_LOG_FROM" "$PG_LOG"; fail "PostgreSQL stopped while the app was still connected"
fi
if pgrep -g "$PGID" >/dev/null || kill -0 "$POSTMASTER" 2>/dev/null; then
  echo "processes left after Ctrl+C:" >&2; pgrep -ag "$PGID" >&2 || true; ps -p "$POSTMASTER" >&2 || true; exit 1
fi
PGID=
echo "demo smoke: Ctrl+C stopped the app, then PostgreSQL; exit code 0, no process left behind"
