// A LitePushConsumer of the official rocketmq-client-nodejs, driven by JSON commands on stdin.
// The Node.js twin of ../lite_consume.py's push mode, driven by tests/broker/test_nodejs_lite.py:
//
//     node lite_consume.mjs '{"endpoint": "127.0.0.1:8081", "group": "G", "topic": "LiteParent", ...}'
//
// Job fields: endpoint, group, topic (the LITE parent: the consumer's bind topic), timeout_ms
// (request timeout), shutdown_s (give up waiting for shutdown on "quit", default 10), and the
// listener's results, in delivery order: the first fail_first deliveries FAILURE (the client
// retries them locally), the next suspend_first ConsumeResultSuspend.of(suspend_ms) (default
// 500), every other SUCCESS.
// First line: {"started": true, "quota", "max_lite_topic_size", "fifo", "long_polling_timeout_ms"}
// (what the consumer learned from the server's settings reply).
// Then one command per stdin line, one {"answer": ...} line per command:
//   {"op": "subscribe", "lite_topic": name, "offset": option} -> {"ok": true} or {"ok": false,
//     "error", "message", "code"}; option (optional): {"policy": "MIN" | "MAX" | "LAST"},
//     {"offset": n}, {"tail_n": n} or {"timestamp": ms};
//   {"op": "unsubscribe", "lite_topic": name} -> the same;
//   {"op": "topics"} -> {"topics": [...]}: the client's lite topic set, sorted;
//   {"op": "quit"} (or the end of stdin): shut down, print {"done": true} and exit.
// Per delivery: {"pushed": {"body", "lite_topic", "topic", "attempt", "message_id"}, "result":
// "SUCCESS" | "FAILURE" | "SUSPEND"}. A telemetry command the client does not handle: the client
// only logs a warning; it is printed as {"unrecognized_command": {"case": n, "command": {...}}}.
// Each SyncLiteSubscription the client sends: {"sync": {"action": "PARTIAL_ADD" | ..., "lite_topics":
// [...], "offset_option": {"policy": "MIN" | "MAX" | "LAST"} | {"offset": n} | {"tail_n": n} |
// {"timestamp": ms} | null}}.
//
// STARTUP_SYNC_RACE (a bug of the client 1.0.8, not of the broker): startup() sends a COMPLETE_ADD
// of the (empty) lite topic set without waiting for it. A subscribeLite right after startup sends
// its PARTIAL_ADD alongside; if the server gets the COMPLETE_ADD last, the set it replaces the
// subscription with is empty, and the lite topic is not consumed until the next COMPLETE_ADD,
// 30 s later. So "started" is printed once the syncs sent during startup are answered.
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import definition from 'rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js';
import { ConsumeResult, ConsumeResultSuspend, LitePushConsumerImpl, OffsetOption } from 'rocketmq-client-nodejs';
import { emit, errorRecord, logger } from './common.mjs';

const POLICIES = { MIN: OffsetOption.MIN_OFFSET, MAX: OffsetOption.MAX_OFFSET, LAST: OffsetOption.LAST_OFFSET };
const namesByValue = values => Object.fromEntries(Object.entries(values).map(([ key, value ]) => [ value, key ]));
const ACTION_NAMES = namesByValue(definition.LiteSubscriptionAction);
const POLICY_NAMES = namesByValue(definition.OffsetOption.Policy);

function offsetOption(spec) {
  if (!spec) return undefined;
  if (spec.policy !== undefined) return POLICIES[spec.policy];
  if (spec.offset !== undefined) return OffsetOption.ofOffset(spec.offset);
  if (spec.tail_n !== undefined) return OffsetOption.ofTailN(spec.tail_n);
  if (spec.timestamp !== undefined) return OffsetOption.ofTimestamp(spec.timestamp);
  throw new Error(`unknown offset option ${JSON.stringify(spec)}`);
}

// A SyncLiteSubscriptionRequest as the tests see it.
function describeSync(request) {
  let option = null;
  if (request.hasOffsetOption()) {
    const proto = request.getOffsetOption();
    const Case = definition.OffsetOption.OffsetTypeCase;
    option = {
      [Case.POLICY]: () => ({ policy: POLICY_NAMES[proto.getPolicy()] }),
      [Case.OFFSET]: () => ({ offset: proto.getOffset() }),
      [Case.TAIL_N]: () => ({ tail_n: proto.getTailN() }),
      [Case.TIMESTAMP]: () => ({ timestamp: proto.getTimestamp() }),
    }[proto.getOffsetTypeCase()]?.() ?? {};
  }
  return { action: ACTION_NAMES[request.getAction()], lite_topics: request.getLiteTopicSetList(), offset_option: option };
}

// Print every SyncLiteSubscription the consumer sends; the calls still unanswered are in the set returned.
function watchSyncs(consumer) {
  const pending = new Set();
  const rpc = consumer.getRpcClientManager();
  const send = rpc.syncLiteSubscription.bind(rpc);
  rpc.syncLiteSubscription = (endpoints, request, timeout) => {
    emit({ sync: describeSync(request) });
    const call = send(endpoints, request, timeout);
    pending.add(call);
    call.then(() => pending.delete(call), () => pending.delete(call));
    return call;
  };
  return pending;
}

// TelemetrySession logs the commands it has no case for (their status is checked, nothing else).
const UNRECOGNIZED = 'Receive unrecognized command from remote';
const watchingLogger = {
  ...logger,
  warn: (...args) => {
    if (String(args[0]).startsWith(UNRECOGNIZED)) emit({ unrecognized_command: { case: args[2], command: args[3] } });
    logger.warn(...args);
  },
};

function listener(job) {
  let failLeft = job.fail_first ?? 0;
  let suspendLeft = job.suspend_first ?? 0;
  return {
    async consume(message) {
      let result = ConsumeResult.SUCCESS;
      if (failLeft > 0) {
        failLeft -= 1;
        result = ConsumeResult.FAILURE;
      } else if (suspendLeft > 0) {
        suspendLeft -= 1;
        result = ConsumeResultSuspend.of(job.suspend_ms ?? 500);
      }
      emit({
        pushed: {
          body: message.body.toString(),
          lite_topic: message.liteTopic ?? null,
          topic: message.topic,
          attempt: message.deliveryAttempt ?? null,
          message_id: message.messageId,
        },
        result: result.name,
      });
      return result;
    },
  };
}

async function answer(consumer, command) {
  switch (command.op) {
    case 'subscribe': {
      const option = offsetOption(command.offset);
      await (option ? consumer.subscribeLite(command.lite_topic, option) : consumer.subscribeLite(command.lite_topic));
      return { ok: true };
    }
    case 'unsubscribe':
      await consumer.unsubscribeLite(command.lite_topic);
      return { ok: true };
    case 'topics':
      return { topics: [ ...consumer.getLiteTopicSet() ].sort() };
    default:
      return { ok: false, error: 'Error', message: `unknown op ${command.op}`, code: null };
  }
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  // LitePushConsumerBuilder.build() is `new LitePushConsumerImpl(options)` then startup(): done here
  // in two steps, to watch the syncs that startup() sends.
  const consumer = new LitePushConsumerImpl({
    endpoints: job.endpoint,
    namespace: '',
    consumerGroup: job.group,
    bindTopic: job.topic,
    messageListener: listener(job),
    requestTimeout: job.timeout_ms ?? 5000,
    sslEnabled: job.tls === true,
    logger: watchingLogger,
  });
  const syncing = watchSyncs(consumer);
  await consumer.startup(); // it has waited for the first settings reply
  await Promise.allSettled([ ...syncing ]); // STARTUP_SYNC_RACE
  // TypeScript-private fields, plain properties at run time: the quotas the settings reply set.
  const manager = consumer.liteSubscriptionManager;
  const settings = consumer.getPushConsumerSettings();
  emit({
    started: true,
    quota: manager.liteSubscriptionQuota,
    max_lite_topic_size: manager.maxLiteTopicSize,
    fifo: settings.isFifo(),
    long_polling_timeout_ms: settings.getLongPollingTimeout(),
  });
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (!line.trim()) continue;
      const command = JSON.parse(line);
      if (command.op === 'quit') break;
      let reply;
      try {
        reply = await answer(consumer, command);
      } catch (err) {
        reply = { ok: false, ...errorRecord(err) };
      }
      emit({ answer: reply });
    }
  } finally {
    // shutdown waits for in-flight long polls (request timeout + the server's polling time)
    await Promise.race([ consumer.shutdown(), sleep((job.shutdown_s ?? 10) * 1000) ]);
  }
  emit({ done: true });
}

main().then(() => process.exit(0), err => {
  process.stderr.write(`lite_consume.mjs failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
