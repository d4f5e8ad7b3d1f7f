import postgres from 'postgres';
export const URL = 'postgres://postgres:pw@127.0.0.1:5601/postgres';
export function pool(extra: Record<string, unknown> = {}) {
  return postgres(URL, { max: 5, onnotice: () => {}, ...extra });
}
export async function freshSchema(name: string) {
  const sql = pool();
  await sql.unsafe(`drop schema if exists ${name} cascade`);
  await sql.end();
}
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const TOKEN = 'abcdefghijklmnop-token';
export function log(...a: unknown[]) { console.log(...a); }
