// Shared by send.mjs and consume.mjs: JSON-lines output and a logger for the client.
import { format } from 'node:util';

export function emit(record) {
  process.stdout.write(`${JSON.stringify(record)}\n`);
}

// A client error as the tests see it: class name, message and the v2 status code if any.
export function errorRecord(err) {
  return {
    error: err?.constructor?.name ?? 'Error',
    message: String(err?.message ?? err),
    code: typeof err?.code === 'number' ? err.code : null,
  };
}

// The client logs to ~/logs/rocketmq by default; send warnings and errors to stderr instead
// (the test shows stderr when a client fails). RMQ_NODE_LOG=debug adds info and debug lines.
const verbose = process.env.RMQ_NODE_LOG === 'debug';
function line(level, args) {
  process.stderr.write(`${new Date().toISOString()} ${level} ${format(...args)}\n`);
}
export const logger = {
  info: (...args) => verbose && line('INFO', args),
  debug: (...args) => verbose && line('DEBUG', args),
  warn: (...args) => line('WARN', args),
  error: (...args) => line('ERROR', args),
};
