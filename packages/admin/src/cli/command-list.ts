import type { Command } from './command.js';
import { auditCommand } from './commands/audit.js';
import { deadLettersCommand } from './commands/dead-letters.js';
import { diagnoseCommand } from './commands/diagnose.js';
import { disableCommand } from './commands/disable.js';
import { dropKeyCommand } from './commands/drop-key.js';
import { enableCommand } from './commands/enable.js';
import { fenceCommand } from './commands/fence.js';
import { parkedEventsCommand } from './commands/parked-events.js';
import { parkedCommand } from './commands/parked.js';
import { rebuildCommand } from './commands/rebuild.js';
import { relaneCommand } from './commands/relane.js';
import { replayKeyCommand } from './commands/replay-key.js';
import { replayCommand } from './commands/replay.js';
import { restartCommand } from './commands/restart.js';
import { skipCommand } from './commands/skip.js';
import { statusCommand } from './commands/status.js';

/** Every verb of the CLI, in the order `sluice --help` lists them. */
export const COMMAND_LIST: readonly Command[] = [
  statusCommand,
  diagnoseCommand,
  restartCommand,
  disableCommand,
  enableCommand,
  skipCommand,
  fenceCommand,
  deadLettersCommand,
  replayCommand,
  parkedCommand,
  parkedEventsCommand,
  replayKeyCommand,
  dropKeyCommand,
  relaneCommand,
  rebuildCommand,
  auditCommand,
];
