import { parseArgs } from 'node:util';
import type { Command, OptionSpec } from './command.js';
import { COMMON_OPTIONS } from './common-options.js';
import { UsageError } from './usage-error.js';

export type OptionValueMap = Readonly<Record<string, string | boolean | undefined>>;

export type ParsedCommandLine =
  | { readonly kind: 'help'; readonly command: Command | undefined }
  | {
      readonly kind: 'run';
      readonly command: Command;
      readonly args: readonly string[];
      readonly values: OptionValueMap;
    };

type ParseArgsOptions = Record<string, { type: 'string' | 'boolean'; short?: string }>;

function parseArgsOptions(specs: Readonly<Record<string, OptionSpec>>): ParseArgsOptions {
  const options: ParseArgsOptions = {};
  for (const [name, spec] of Object.entries(specs)) {
    options[name] = name === 'help' ? { type: spec.type, short: 'h' } : { type: spec.type };
  }
  return options;
}

/** parseArgs's errors, in a line: `unknown option --x`, `--from needs a value`, … */
function parseError(error: unknown, hint: string): unknown {
  if (!(error instanceof TypeError) || !('code' in error)) return error;
  const option = /'(-[^' ]+)/.exec(error.message)?.[1] ?? '';
  switch (error.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return new UsageError(`unknown option ${option} (see ${hint})`);
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      return new UsageError(
        error.message.includes('ambiguous')
          ? `${option} needs a value; write ${option}=<value> for a value starting with "-" (see ${hint})`
          : `${error.message} (see ${hint})`,
      );
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return new UsageError(`${error.message} (see ${hint})`);
    default:
      return error;
  }
}

/**
 * Splits argv into the verb, its positional arguments and its options. The verb is the first
 * positional argument; common options may come before or after it. Options are checked strictly
 * against the verb's own list, so a typo is a usage error rather than silently ignored.
 * @throws {UsageError}
 */
export function parseCommandLine(argv: readonly string[], commands: readonly Command[]): ParsedCommandLine {
  // First pass, lenient, knowing every option of every verb (they agree on types), only to find
  // the verb: `--schema x status` must not take `x` for it.
  const everyOption: Record<string, OptionSpec> = { ...COMMON_OPTIONS };
  for (const command of commands) Object.assign(everyOption, command.options);
  const first = parseArgs({
    args: [...argv],
    options: parseArgsOptions(everyOption),
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const positionals = first.tokens.filter((t) => t.kind === 'positional');
  const verb = positionals[0];
  const wantsHelp = first.values['help'] === true;
  const find = (name: string) => {
    const command = commands.find((c) => c.name === name);
    if (!command) throw new UsageError(`unknown command "${name}" (see sluice --help)`);
    return command;
  };

  if (verb === undefined) {
    if (wantsHelp) return { kind: 'help', command: undefined };
    throw new UsageError('missing command (see sluice --help)');
  }
  if (verb.value === 'help') {
    const topic = positionals[1];
    return { kind: 'help', command: topic === undefined ? undefined : find(topic.value) };
  }
  const command = find(verb.value);
  if (wantsHelp) return { kind: 'help', command };

  const rest = argv.filter((_, i) => i !== verb.index);
  let second;
  try {
    second = parseArgs({
      args: rest,
      options: parseArgsOptions({ ...COMMON_OPTIONS, ...command.options }),
      strict: true,
      allowPositionals: true,
      tokens: true,
    });
  } catch (error) {
    throw parseError(error, `sluice ${command.name} --help`);
  }
  // Given twice, an option would silently take its last value: `--from beginning --from now`.
  const given = new Set<string>();
  for (const token of second.tokens) {
    if (token.kind !== 'option') continue;
    if (given.has(token.name)) {
      throw new UsageError(`--${token.name} is given more than once (see sluice ${command.name} --help)`);
    }
    given.add(token.name);
  }
  const wanted = command.positionals;
  const missing = wanted[second.positionals.length];
  if (missing && missing.optional !== true) {
    throw new UsageError(`missing <${missing.name}> (see sluice ${command.name} --help)`);
  }
  const extra = second.positionals[wanted.length];
  if (extra !== undefined) {
    throw new UsageError(`unexpected argument "${extra}" (see sluice ${command.name} --help)`);
  }
  for (const [name, spec] of Object.entries(command.options)) {
    if (spec.type === 'string' && spec.required === true && second.values[name] === undefined) {
      throw new UsageError(`missing --${name} <${spec.value}> (see sluice ${command.name} --help)`);
    }
  }
  const values: Record<string, string | boolean | undefined> = {};
  // No option is declared `multiple`, so every value is a string or a boolean.
  for (const [name, value] of Object.entries(second.values as Record<string, string | boolean | undefined>)) {
    values[name] = value;
  }
  return { kind: 'run', command, args: second.positionals, values };
}
