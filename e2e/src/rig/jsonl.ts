// Append-only JSONL histories. Every record is one writeSync on a descriptor opened once: nothing is
// buffered in the process, so a record written before a `kill -9` is on disk (in the page cache,
// which survives the process).
import { closeSync, createReadStream, openSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';

export class JsonlWriter {
  readonly #fd: number;
  readonly file: string;

  constructor(file: string) {
    this.file = file;
    this.#fd = openSync(file, 'a');
  }

  /** Writes records as lines in one system call. */
  write(...records: readonly unknown[]): void {
    if (records.length === 0) return;
    writeSync(this.#fd, records.map((r) => `${JSON.stringify(r)}\n`).join(''));
  }

  close(): void {
    closeSync(this.#fd);
  }
}

/**
 * Reads a JSONL file line by line. A final line cut short (a process killed in the middle of a
 * write cannot produce one: writes are single system calls, but be safe) is reported, not parsed.
 */
export async function readJsonl(
  file: string,
  onRecord: (record: unknown) => void,
): Promise<{ torn: number }> {
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  let torn = 0;
  for await (const line of lines) {
    if (line === '') continue;
    try {
      onRecord(JSON.parse(line));
    } catch {
      torn += 1;
    }
  }
  return { torn };
}
