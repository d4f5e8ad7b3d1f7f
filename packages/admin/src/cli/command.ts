import type { Admin } from '../create-admin.js';

/** An option of one command: `--name <value>` or a `--flag`. */
export type OptionSpec =
  | {
      readonly type: 'string';
      /** Placeholder of the value in help: `--from <where>`. */
      readonly value: string;
      readonly description: string;
      /** The command cannot run without it (checked with the other usage errors). */
      readonly required?: boolean;
    }
  | { readonly type: 'boolean'; readonly description: string };

/** The parsed option values of one command, by option name (without the dashes). */
export interface OptionValues<O extends string> {
  /** The value of a `--name <value>` option, undefined when absent. */
  text(name: O): string | undefined;
  /** Whether a `--flag` was given. */
  flag(name: O): boolean;
}

export interface CommandInput<O extends string> {
  /** The positional arguments, as many as the command declares (checked before `prepare`). */
  readonly args: readonly string[];
  readonly options: OptionValues<O>;
  /** Who acts, for the audit: `--actor`, else `cli:<OS user>`. */
  readonly actor: string;
}

/** What a command does once its command line is checked: it needs only the database now. */
export type CommandWork = (admin: Admin) => Promise<string>;

/** One verb of the `sluice` CLI: its help, its options, and a thin wrapper over the admin API. */
export interface Command<O extends string = string> {
  readonly name: string;
  /** One line for `sluice --help`. */
  readonly summary: string;
  /** Positional arguments, in order: required, but for a last one marked optional. */
  readonly positionals: readonly {
    readonly name: string;
    readonly description: string;
    readonly optional?: boolean;
  }[];
  readonly options: Readonly<Record<O, OptionSpec>>;
  /** Extra lines for `sluice <verb> --help`. */
  readonly notes?: readonly string[];
  /**
   * Checks and converts the arguments and options, and returns the work to do. Every usage error
   * comes from here, before a database is even looked for: a typo is reported as one, not as
   * "no database given" or a connection failure.
   * @throws {UsageError} @throws {InvalidOptionError}
   */
  prepare(input: CommandInput<O>): CommandWork;
}

/** Declares a command with its option names checked against its `prepare`. */
export function defineCommand<const O extends string>(command: Command<O>): Command {
  return command;
}
