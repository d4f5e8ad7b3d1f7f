// Run by pack.e2e.test.ts inside the scratch app, where vitest is not installed: the installed
// @sluice/testing's startPostgres() (embedded PostgreSQL there). Prints the server's URL and stops
// the server when its standard input closes.
import { startPostgres } from '@sluice/testing';

const server = await startPostgres({
  log: (message) => {
    console.error(message);
  },
});
console.log(`server ${server.source} ${server.url}`);
process.stdin.resume();
process.stdin.once('end', () => {
  void server.stop().then(() => {
    console.log('server stopped');
    process.stdin.pause();
  });
});
