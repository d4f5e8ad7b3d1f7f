#!/usr/bin/env bash
# Sluice on postgres.js 3 (docs/operating.md#database-client). The workspace develops and tests on
# postgres.js 4; users of 3.4 install Sluice too. This clones the checkout, names the 3.4 release
# in its catalog, and runs there the core, admin and Fastify suites (their database tests included),
# the PgBouncer suite, and the packed-install test (the READMEs' examples in an app that installs
# that release).
set -euo pipefail
cd "$(dirname "$0")/.."

V3=3.4.10
WORK=$(mktemp -d)
# Under root the embedded PostgreSQL runs as the postgres OS user, who must reach into the clone.
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
git clone -q . "$WORK/sluice"
cd "$WORK/sluice"
sed -i "s/^  postgres: .*/  postgres: $V3/" pnpm-workspace.yaml
pnpm install --no-frozen-lockfile --prefer-offline >/dev/null
installed=$(node -p "require('./packages/core/node_modules/postgres/package.json').version")
if [ "$installed" != "$V3" ]; then
  echo "driver-v3: postgres $installed installed, not $V3" >&2
  exit 1
fi
pnpm build >/dev/null
for package in core admin fastify; do pnpm --filter "@sluice/$package" test; done
# Behind PgBouncer: postgres.js 3 has no max_pipeline; Sluice's own pools queue their statements.
(cd e2e && npx vitest run src/pgbouncer.e2e.test.ts)
pnpm test:pack
echo "driver-v3: core, admin, fastify and the pack test passed on postgres $V3"
