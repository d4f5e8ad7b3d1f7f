import type { Command, OptionSpec } from './command.js';
import { COMMON_OPTIONS } from './common-options.js';
import { EXIT_CODES_HELP } from './exit-codes.js';
import { formatFacts } from './format-table.js';

const indent = (text: string) =>
  text
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');

function optionLabel(name: string, spec: OptionSpec): string {
  const flag = name === 'help' ? '-h, --help' : `--${name}`;
  return spec.type === 'string' ? `${flag} <${spec.value}>` : flag;
}

function optionList(specs: Readonly<Record<string, OptionSpec>>): string {
  return indent(
    formatFacts(Object.entries(specs).map(([name, spec]) => [optionLabel(name, spec), spec.description])),
  );
}

const commonOptions = () => `Common options:\n${optionList(COMMON_OPTIONS)}`;

/** `sluice <verb> [options]` with required options spelled out and optional ones in brackets. */
export function usageLine(command: Command): string {
  const parts = [
    'sluice',
    command.name,
    ...command.positionals.map((p) => (p.optional === true ? `[<${p.name}>]` : `<${p.name}>`)),
  ];
  for (const [name, spec] of Object.entries(command.options)) {
    const label = optionLabel(name, spec);
    parts.push(spec.type === 'string' && spec.required === true ? label : `[${label}]`);
  }
  return parts.join(' ');
}

/** What `sluice --help` prints: every verb, the common options and the exit codes. */
export function globalHelp(commands: readonly Command[]): string {
  return [
    'Usage: sluice <command> [arguments] [options]',
    '',
    'Operator actions on Sluice consumers. Every change is audited; a refused action changes nothing.',
    '',
    'Commands:',
    indent(formatFacts(commands.map((c) => [c.name, c.summary]))),
    '',
    commonOptions(),
    '',
    'Exit codes:',
    indent(formatFacts(EXIT_CODES_HELP)),
    '',
    'With --json a failure is one line of JSON on stderr: {"code": "SLUICE_…", "message": "…", "exitCode": n}.',
    '',
    'Run `sluice <command> --help` for the arguments and options of a command.',
  ].join('\n');
}

/** What `sluice <verb> --help` prints. */
export function commandHelp(command: Command): string {
  const sections = [`Usage: ${usageLine(command)}`, '', command.summary];
  if (command.positionals.length > 0) {
    sections.push(
      '',
      'Arguments:',
      indent(formatFacts(command.positionals.map((p) => [`<${p.name}>`, p.description]))),
    );
  }
  if (Object.keys(command.options).length > 0) {
    sections.push('', 'Options:', optionList(command.options));
  }
  if (command.notes && command.notes.length > 0) sections.push('', ...command.notes);
  sections.push('', commonOptions(), '', 'Exit codes: see sluice --help.');
  return sections.join('\n');
}
