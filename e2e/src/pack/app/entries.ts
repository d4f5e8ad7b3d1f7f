// Run by pack.e2e.test.ts inside the scratch app: every public entry point of the four packages,
// type-checked with skipLibCheck off and loaded by Node as an app loads them.
import * as admin from '@sluice/admin';
import * as core from '@sluice/core';
import * as fastify from '@sluice/fastify';
import * as testing from '@sluice/testing';
import * as processes from '@sluice/testing/processes';

const loaded: Record<string, string[]> = {
  '@sluice/admin': Object.keys(admin),
  '@sluice/core': Object.keys(core),
  '@sluice/fastify': Object.keys(fastify),
  '@sluice/testing': Object.keys(testing),
  '@sluice/testing/processes': Object.keys(processes),
};
console.log(JSON.stringify(loaded));
