// Which statements end the transaction they run in (transaction-end.ts): each rule, the texts a
// handler may really send (a migration-style file through unsafe()), and properties over texts
// built from statements, blanks, comments and literals that hold semicolons and keywords.
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { transactionEndIn } from './transaction-end.js';

describe('statements that end the transaction', () => {
  test.each([
    ['commit', 'COMMIT'],
    ['COMMIT AND CHAIN', 'COMMIT'],
    ['  end;', 'END'],
    ['Abort', 'ABORT'],
    ['rollback', 'ROLLBACK'],
    ['rollback work', 'ROLLBACK'],
    ['rollback and chain', 'ROLLBACK'],
    ['rollback prepared $$x$$', 'ROLLBACK'],
    ["prepare transaction 'x'", 'PREPARE TRANSACTION'],
    ["prepare /* c */ transaction E'x'", 'PREPARE TRANSACTION'],
    ['-- done\n  /* really */ commit', 'COMMIT'],
    ['/* a /* nested */ comment */ commit', 'COMMIT'],
    ['insert into t values (1); commit', 'COMMIT'],
    ['begin; insert into t values (1); commit;', 'COMMIT'],
    ["select ';'; end", 'END'],
    // With standard_conforming_strings off the backslash escapes the quote: the COMMIT is a statement.
    ["select 'x\\''; commit; select ''", 'COMMIT'],
  ])('%j is refused as %s', (sql, named) => {
    expect(transactionEndIn(sql)).toBe(named);
  });

  test.each([
    'select 1',
    'rollback to s1',
    'rollback to savepoint s1',
    'rollback work to s1',
    'rollback/*c*/to s1',
    'rollback -- undo\n to s1',
    'savepoint s1',
    'release savepoint s1',
    'begin',
    'start transaction',
    'prepare transaction as select 1',
    'commit_log_size()',
    'select endpoint from t',
    "select 'x; commit'",
    "select E'it\\'s; commit'",
    'select "a;commit" from t',
    'select $$ ; commit $$',
    'select $fn$ ; commit $fn$',
    'select 1 -- ; commit',
    'select 1 /* ; commit */',
    '/* x /* y */ commit */ select 1',
    'select $1; select 2',
    '',
  ])('%j is not refused', (sql) => {
    expect(transactionEndIn(sql)).toBeUndefined();
  });

  test('a text of many comments is read in one pass (a backtracking pattern took seconds at 30)', () => {
    expect(
      transactionEndIn(`${'/**/'.repeat(50_000)} select 1; ${'/* generated */\n'.repeat(50_000)}commit`),
    ).toBe('COMMIT');
  });

  const quiet = fc.constantFrom(
    'select 1',
    "select ';commit;'",
    'select $q$ ; end ; $q$',
    'insert into "t;commit" values (1)',
    'rollback to s',
    'savepoint s',
    'select 2 -- ; abort\n',
    "prepare transaction as select 'x'",
  );
  const ending = fc.constantFrom(
    ['commit', 'COMMIT'],
    ['END', 'END'],
    ['abort work', 'ABORT'],
    ['rollback', 'ROLLBACK'],
    ["prepare transaction 'gid'", 'PREPARE TRANSACTION'],
  );
  const blank = fc.constantFrom('', ' ', '\n', '/* c */', '-- c\n', '/* a /* b */ c */ ');

  test('properties: the first statement that ends the transaction is named, wherever it stands; without one, none is', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(
            blank,
            fc.oneof(
              quiet.map((s) => [s, undefined] as const),
              ending,
            ),
          ),
          {
            minLength: 1,
            maxLength: 8,
          },
        ),
        (statements) => {
          const sql = statements.map(([space, [text]]) => `${space}${text}`).join(';');
          const first = statements.find(([, [, named]]) => named !== undefined)?.[1][1];
          expect(transactionEndIn(sql)).toBe(first);
        },
      ),
    );
  });
});
