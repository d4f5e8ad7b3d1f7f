import { graphemes } from './format-text.js';

export type Alignment = 'left' | 'right';

/**
 * An aligned text table: a header row, then one row per entry, columns two spaces apart. Numbers
 * read best right-aligned, so each column says how it aligns. Trailing spaces are trimmed.
 */
export function formatTable(
  columns: readonly { readonly title: string; readonly align?: Alignment }[],
  rows: readonly (readonly string[])[],
): string {
  const width = (text: string) => graphemes(text).length;
  // A cell is one line: a line break or tab in a value (a stream id, a name, an actor) would start
  // what looks like another row.
  const cells = rows.map((row) => row.map(oneLine));
  const widths = columns.map((column, i) =>
    Math.max(width(column.title), ...cells.map((row) => width(row[i] ?? ''))),
  );
  const line = (cells: readonly string[]) =>
    columns
      .map((column, i) => {
        const cell = cells[i] ?? '';
        const pad = ' '.repeat((widths[i] ?? 0) - width(cell));
        return column.align === 'right' ? pad + cell : cell + pad;
      })
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.title)), ...cells.map(line)].join('\n');
}

/** `text` with its line breaks and tabs written as `\n`, `\r` and `\t`. */
function oneLine(text: string): string {
  return text.replace(/[\n\r\t]/g, (c) => (c === '\n' ? '\\n' : c === '\r' ? '\\r' : '\\t'));
}

/** Aligned `key  value` lines, for the facts of one record. */
export function formatFacts(facts: readonly (readonly [string, string])[]): string {
  const keyWidth = Math.max(0, ...facts.map(([key]) => graphemes(key).length));
  return facts
    .map(([key, value]) => `${key}${' '.repeat(keyWidth - graphemes(key).length)}  ${value}`.trimEnd())
    .join('\n');
}
