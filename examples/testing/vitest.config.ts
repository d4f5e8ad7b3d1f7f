// vitest.config.ts
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: { globalSetup: ['@sluice/testing/vitest/global-setup'] }, // one server, a migrated template
});
