// ali-ons 3.12.0 (npm, installed by `make setup` in ./ali-ons) driven by one JSON command, for
// pyrmq's remoting tests (tests/support/remoting_peers.py starts it). The command comes as argv[2],
// else as the first line of stdin; the schema is in tests/support/remoting_peers.py. Every event is
// one JSON line on stdout, {"event": ...}: started, sent, send-error, received, error, done, closed.
// The driver stops on SIGTERM, SIGINT or stdin's end (and a producer once its messages are sent,
// unless "linger" is set). ali-ons logs its warnings on stderr, so stdout holds events only.
'use strict';

const path = require('path');
const readline = require('readline');
const { createRequire } = require('module');

const requireOns = createRequire(path.join(__dirname, 'ali-ons', 'package.json'));
const { Producer, Consumer, Message } = requireOns('ali-ons');

const emit = event => process.stdout.write(JSON.stringify(event) + '\n');
const describe = err => ({ error: String(err && err.message || err), name: err && err.name, code: err && err.code });

let client = null;
let stopping = false;

async function stop(reason) {
  if (stopping) return;
  stopping = true;
  // close() unregisters from every broker it knows; an unanswering one must not hold the exit.
  setTimeout(() => { emit({ event: 'closed', reason, clean: false }); process.exit(0); }, 5000).unref();
  try {
    if (client) await client.close();
  } catch (err) {
    emit({ event: 'error', where: 'close', ...describe(err) });
  }
  emit({ event: 'closed', reason, clean: true });
  process.exit(0);
}

function buildMessage(cmd, spec) {
  const body = spec.bodyB64 ? Buffer.from(spec.bodyB64, 'base64') : Buffer.from(spec.body || '', 'utf8');
  const msg = new Message(spec.topic || cmd.topic, spec.tag || null, body);
  if (spec.keys && spec.keys.length) msg.keys = spec.keys;
  for (const [key, value] of Object.entries(spec.props || {})) msg.properties[key] = String(value);
  if (spec.delayLevel) msg.delayTimeLevel = spec.delayLevel;
  if (spec.deliverTimeMs) msg.setStartDeliverTime(spec.deliverTimeMs);
  if (spec.shardingKey) msg.shardingKey = spec.shardingKey;
  return msg;
}

async function runProducer(cmd) {
  client = new Producer({
    httpclient: {}, // never used with nameSrv, but ali-ons asserts one is given
    nameSrv: cmd.nameSrv,
    producerGroup: cmd.group,
    sendMsgTimeout: cmd.timeoutMs || 3000,
    retryTimesWhenSendFailed: cmd.retries === undefined ? 2 : cmd.retries,
  });
  client.on('error', err => emit({ event: 'error', ...describe(err) }));
  await client.ready();
  emit({ event: 'started', peer: 'ali-ons', role: cmd.role, pid: process.pid });
  const messages = cmd.messages || [];
  for (let index = 0; index < messages.length && !stopping; index++) {
    try {
      const result = await client.send(buildMessage(cmd, messages[index]));
      // ali-ons sets no UNIQ_KEY: the broker's msgId (store host + commit-log offset) is its only id.
      emit({
        event: 'sent',
        index,
        msgId: result.msgId,
        offsetMsgId: result.msgId,
        queueId: result.messageQueue.queueId === undefined ? null : Number(result.messageQueue.queueId),
        queueOffset: result.queueOffset,
        status: result.sendStatus,
        broker: result.messageQueue.brokerName,
      });
    } catch (err) {
      emit({ event: 'send-error', index, ...describe(err) });
    }
  }
  emit({ event: 'done' });
  if (!cmd.linger) await stop('done');
}

async function runConsumer(cmd) {
  const count = cmd.count || 0;
  const failFirst = cmd.failFirst || 0;
  let consumed = 0;
  client = new Consumer({
    httpclient: {},
    nameSrv: cmd.nameSrv,
    consumerGroup: cmd.group,
    isBroadcast: cmd.model === 'BROADCASTING',
    consumeFromWhere: cmd.consumeFromWhere || 'CONSUME_FROM_FIRST_OFFSET',
    maxReconsumeTimes: cmd.maxReconsumeTimes === undefined ? 16 : cmd.maxReconsumeTimes,
    brokerSuspendMaxTimeMillis: cmd.suspendMs || 15000,
    rebalanceInterval: cmd.rebalanceMs || 10000,
  });
  client.on('error', err => emit({ event: 'error', ...describe(err) }));
  await client.ready();
  client.subscribe(cmd.topic, cmd.subExpression || '*', async (msg, mq) => {
    // Each message fails (ACTION_RETRY: CONSUMER_SEND_MSG_BACK) while its reconsumeTimes < failFirst.
    const retry = msg.reconsumeTimes < failFirst;
    const body = msg.body || Buffer.alloc(0);
    emit({
      event: 'received',
      msgId: msg.msgId,
      topic: msg.topic,
      tags: msg.tags,
      keys: msg.keys ? msg.keys.split(' ') : [],
      body: body.toString('utf8'),
      bodyB64: body.toString('base64'),
      // ali-ons reads the properties' trailing separator as a key "": leave it out
      properties: Object.fromEntries(Object.entries(msg.properties).filter(([key]) => key !== '')),
      reconsumeTimes: msg.reconsumeTimes,
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      broker: mq && mq.brokerName,
      storeHost: msg.storeHost,
      result: retry ? 'RETRY' : 'SUCCESS',
    });
    if (retry) return Consumer.ACTION_RETRY;
    consumed += 1;
    if (count && consumed === count) {
      emit({ event: 'done' });
      setImmediate(() => stop('done'));
    }
    return undefined;
  });
  emit({ event: 'started', peer: 'ali-ons', role: cmd.role, pid: process.pid });
}

async function main() {
  const text = process.argv[2] || await firstStdinLine();
  const cmd = JSON.parse(text);
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.stdin.on('end', () => stop('stdin closed'));
  process.stdin.resume();
  if (cmd.role === 'producer') return runProducer(cmd);
  if (cmd.role === 'push-consumer') return runConsumer(cmd);
  emit({ event: 'error', error: `ali-ons has no role ${JSON.stringify(cmd.role)} (producer, push-consumer)` });
  process.exit(2);
}

function firstStdinLine() {
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: process.stdin });
    lines.once('line', line => { lines.close(); resolve(line); });
    lines.once('close', () => reject(new Error('no command on argv or stdin')));
  });
}

main().catch(err => {
  emit({ event: 'error', where: 'main', ...describe(err) });
  process.exit(1);
});
