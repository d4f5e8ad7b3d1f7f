// Which statement of a SQL text would end the transaction it runs in (docs/design.md §4.6): COMMIT,
// END, ROLLBACK (but ROLLBACK TO a savepoint), ABORT, PREPARE TRANSACTION '…'. A text may hold
// several statements (a simple-protocol query runs them all), so each is looked at, as PostgreSQL's
// lexer would split them: semicolons inside string literals, quoted identifiers, dollar quotes and
// comments (nested ones too) split nothing. One pass over the text, no backtracking.

const IDENTIFIER_START = /[A-Za-z_\u0080-\uFFFF]/;
const IDENTIFIER_PART = /[A-Za-z0-9_$\u0080-\uFFFF]/;
const DOLLAR_TAG = /\$([A-Za-z_\u0080-\uFFFF][A-Za-z0-9_\u0080-\uFFFF]*)?\$/y;

/** The statement of `sql` that ends the transaction, named as PostgreSQL spells it; undefined when none does. */
export function transactionEndIn(sql: string): string | undefined {
  // Most texts are one statement: its start is all there is to read.
  if (!sql.includes(';')) return endingStatement(sql, 0);
  // With standard_conforming_strings off (a session may set it) a backslash escapes a quote in any
  // string literal: such a text is read both ways, and refused if either reading ends the transaction.
  return statementsEnding(sql, false) ?? (sql.includes('\\') ? statementsEnding(sql, true) : undefined);
}

function statementsEnding(sql: string, backslashes: boolean): string | undefined {
  for (let at = 0; at < sql.length; at = nextStatement(sql, at, backslashes)) {
    const ends = endingStatement(sql, at);
    if (ends !== undefined) return ends;
  }
  return undefined;
}

/** The statement starting at `at` (before its blanks and comments), when it ends the transaction. */
function endingStatement(sql: string, at: number): string | undefined {
  const [first, afterFirst] = wordAt(sql, skipBlank(sql, at));
  if (first === 'commit' || first === 'end' || first === 'abort') return first.toUpperCase();
  if (first === 'rollback') {
    const [second, afterSecond] = wordAt(sql, skipBlank(sql, afterFirst));
    const third =
      second === 'work' || second === 'transaction' ? wordAt(sql, skipBlank(sql, afterSecond))[0] : second;
    return third === 'to' ? undefined : 'ROLLBACK';
  }
  if (first === 'prepare') {
    const [next, afterNext] = wordAt(sql, skipBlank(sql, afterFirst));
    // PREPARE TRANSACTION takes a string literal; `prepare transaction as …` prepares a statement.
    if (next === 'transaction' && /^(?:'|[Ee]'|[Uu]&'|\$)/.test(sql.slice(skipBlank(sql, afterNext)))) {
      return 'PREPARE TRANSACTION';
    }
  }
  return undefined;
}

/** The identifier or keyword at `at`, lower-cased, and where it ends; '' when there is none. */
function wordAt(sql: string, at: number): [string, number] {
  if (at >= sql.length || !IDENTIFIER_START.test(sql.charAt(at))) return ['', at];
  let end = at + 1;
  while (end < sql.length && IDENTIFIER_PART.test(sql.charAt(end))) end += 1;
  return [sql.slice(at, end).toLowerCase(), end];
}

/** Past blanks and comments from `at`. */
function skipBlank(sql: string, at: number): number {
  let i = at;
  for (;;) {
    const c = sql.charAt(i);
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v') i += 1;
    else if (c === '-' && sql.charAt(i + 1) === '-') i = lineEnd(sql, i);
    else if (c === '/' && sql.charAt(i + 1) === '*') i = commentEnd(sql, i);
    else return i;
  }
}

/** Just past the `;` that ends the statement at `at` (the text's end when none does). */
function nextStatement(sql: string, at: number, backslashes: boolean): number {
  let i = at;
  while (i < sql.length) {
    const c = sql.charAt(i);
    if (c === ';') return i + 1;
    if (c === "'") i = quotedEnd(sql, i, "'", backslashes || isEscapeString(sql, i));
    else if (c === '"') i = quotedEnd(sql, i, '"', false);
    else if (c === '-' && sql.charAt(i + 1) === '-') i = lineEnd(sql, i);
    else if (c === '/' && sql.charAt(i + 1) === '*') i = commentEnd(sql, i);
    else if (c === '$' && (i === 0 || !IDENTIFIER_PART.test(sql.charAt(i - 1)))) i = dollarQuotedEnd(sql, i);
    else i += 1;
  }
  return sql.length;
}

/** An E'…' string (backslash escapes), not a quote after an identifier ending in e. */
function isEscapeString(sql: string, quote: number): boolean {
  const before = sql.charAt(quote - 1);
  return (before === 'E' || before === 'e') && (quote < 2 || !IDENTIFIER_PART.test(sql.charAt(quote - 2)));
}

function quotedEnd(sql: string, open: number, quote: string, backslashes: boolean): number {
  let i = open + 1;
  while (i < sql.length) {
    const c = sql.charAt(i);
    if (backslashes && c === '\\') i += 2;
    else if (c === quote) {
      if (sql.charAt(i + 1) !== quote) return i + 1;
      i += 2; // a doubled quote stands for itself
    } else i += 1;
  }
  return sql.length;
}

function lineEnd(sql: string, at: number): number {
  const newline = sql.indexOf('\n', at);
  return newline === -1 ? sql.length : newline + 1;
}

/** Past the comment opened at `at`; PostgreSQL's block comments nest. */
function commentEnd(sql: string, at: number): number {
  let depth = 0;
  let i = at;
  while (i < sql.length) {
    if (sql.charAt(i) === '/' && sql.charAt(i + 1) === '*') {
      depth += 1;
      i += 2;
    } else if (sql.charAt(i) === '*' && sql.charAt(i + 1) === '/') {
      depth -= 1;
      i += 2;
      if (depth === 0) return i;
    } else i += 1;
  }
  return sql.length;
}

/** Past a $tag$…$tag$ literal opened at `at`; a lone `$` (a parameter such as $1) is one character. */
function dollarQuotedEnd(sql: string, at: number): number {
  DOLLAR_TAG.lastIndex = at;
  const open = DOLLAR_TAG.exec(sql);
  if (!open) return at + 1;
  const close = sql.indexOf(open[0], at + open[0].length);
  return close === -1 ? sql.length : close + open[0].length;
}
