// Consume with the official rocketmq-client-nodejs and print one JSON line per event.
// The Node.js twin of ../consume.py (same job and output, plus a few fields), driven by
// tests/broker/test_nodejs_client.py:
//
//     node consume.mjs '{"endpoint": "127.0.0.1:8081", "mode": "simple", "group": "G", "topic": "T", ...}'
//
// Job fields: mode ("simple" or "push"), group, topic, expression (TAG, default "*"), count
// (stop after this many deliveries), deadline_s (give up after this long), timeout_ms (request
// timeout).
// simple: await_s (long polling seconds), invisible_ms (receive), batch (max messages per
// receive), max_receives (stop after this many receive calls), action per delivery:
//   "ack";
//   "change_then_ack": changeInvisibleDuration change_ms (default 15 s), then ack with the new
//     handle; with ack_stale_first, first ack with the replaced handle ("stale_ack" is the
//     error it got, null if it was accepted);
//   "none": never ack (redelivered later); "none_then_ack": ack deliveries with attempt > 1;
//   "nack": changeInvisibleDuration nack_ms (default 0: redelivered at once), never ack.
// push: result per delivery: "success", "failure" (always) or "fail_first" (FAILURE on attempt
// 1); fail_bodies (list: these always fail); settle_s (wait after the last delivery so acks and
// nacks go out, default 1); shutdown_s (give up waiting for shutdown, default 15).
// Output per delivery: {"body" (its first 4 KiB), "body_size", "tag", "keys", "message_id",
// "attempt", "properties", "message_group", "priority", "topic", "corrupted", "acked": true/false/null,
// "error": str|null}, plus "handle_changed"/"stale_ack" (change_then_ack) or "result" (push);
// receive errors: {"receive_error": str, "code": int|null}; push: {"settings": {...}} (what the
// consumer learned from the server's settings reply); last line {"done": true}.
import { setTimeout as sleep } from 'node:timers/promises';
import { ConsumeResult, PushConsumer, SimpleConsumer } from 'rocketmq-client-nodejs';
import { emit, errorRecord, logger } from './common.mjs';

const BODY_SHOWN_MAX = 4096; // bytes of the body printed ("body_size" has the whole length)

function describe(message, extra) {
  return {
    body: message.body.subarray(0, BODY_SHOWN_MAX).toString(),
    body_size: message.body.length,
    tag: message.tag ?? null,
    keys: [ ...message.keys ],
    message_id: message.messageId,
    attempt: message.deliveryAttempt ?? null,
    properties: Object.fromEntries(message.properties),
    message_group: message.messageGroup || null,
    priority: message.priority ?? null,
    topic: message.topic,
    corrupted: Boolean(message.corrupted),
    acked: null,
    error: null,
    ...extra,
  };
}

function errorText(err) {
  const { error, message } = errorRecord(err);
  return `${error}: ${message}`;
}

async function runSimple(job, options) {
  const consumer = new SimpleConsumer({
    ...options,
    subscriptions: new Map([[ job.topic, job.expression ?? '*' ]]),
    awaitDuration: (job.await_s ?? 5) * 1000,
  });
  await consumer.startup();
  const end = Date.now() + (job.deadline_s ?? 60) * 1000;
  const action = job.action ?? 'ack';
  let delivered = 0;
  let receives = 0;
  try {
    while (delivered < (job.count ?? 1) && Date.now() < end && receives < (job.max_receives ?? Infinity)) {
      receives += 1;
      let messages;
      try {
        messages = await consumer.receive(job.batch ?? 32, job.invisible_ms ?? 15000);
      } catch (err) {
        emit({ receive_error: errorText(err), code: errorRecord(err).code });
        await sleep(200);
        continue;
      }
      for (const message of messages) {
        delivered += 1;
        const record = describe(message);
        try {
          if (action === 'change_then_ack') {
            const before = message.receiptHandle;
            await consumer.changeInvisibleDuration(message, job.change_ms ?? 15000);
            const after = message.receiptHandle;
            record.handle_changed = Boolean(after) && after !== before;
            if (job.ack_stale_first) { // the handle the change replaced must be refused
              message.receiptHandle = before;
              try {
                await consumer.ack(message);
                record.stale_ack = null;
              } catch (err) {
                record.stale_ack = errorRecord(err);
              }
              message.receiptHandle = after;
            }
            await consumer.ack(message);
            record.acked = true;
          } else if (action === 'nack') {
            await consumer.changeInvisibleDuration(message, job.nack_ms ?? 0);
          } else if (action === 'ack' || (action === 'none_then_ack' && message.deliveryAttempt > 1)) {
            await consumer.ack(message);
            record.acked = true;
          }
        } catch (err) {
          record.acked = false;
          record.error = errorText(err);
        }
        emit(record);
      }
    }
  } finally {
    await consumer.shutdown();
  }
}

async function runPush(job, options) {
  const want = job.count ?? 1;
  const mode = job.result ?? 'success';
  const failBodies = new Set(job.fail_bodies ?? []);
  let delivered = 0;
  let enough;
  const done = new Promise(resolve => { enough = resolve; });
  const consumer = new PushConsumer({
    ...options,
    subscriptions: new Map([[ job.topic, job.expression ?? '*' ]]),
    messageListener: {
      async consume(message) {
        const body = message.body.toString();
        const fail = mode === 'failure' || failBodies.has(body)
          || (mode === 'fail_first' && (message.deliveryAttempt ?? 1) <= 1);
        const result = fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        emit(describe(message, { acked: !fail, result: result.name }));
        delivered += 1;
        if (delivered >= want) enough();
        return result;
      },
    },
  });
  await consumer.startup();
  const settings = consumer.getPushConsumerSettings();
  const retryPolicy = consumer.getRetryPolicy();
  emit({
    settings: {
      fifo: settings.isFifo(),
      receive_batch_size: settings.getReceiveBatchSize(),
      long_polling_timeout_ms: settings.getLongPollingTimeout(),
      max_attempts: retryPolicy ? retryPolicy.getMaxAttempts() : null,
    },
  });
  try {
    await Promise.race([ done, sleep((job.deadline_s ?? 60) * 1000) ]);
    await sleep((job.settle_s ?? 1) * 1000); // let the acks / nacks go out
  } finally {
    // shutdown waits for in-flight long polls (request timeout + the server's polling time)
    await Promise.race([ consumer.shutdown(), sleep((job.shutdown_s ?? 15) * 1000) ]);
  }
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  const options = {
    endpoints: job.endpoint,
    namespace: '',
    consumerGroup: job.group,
    requestTimeout: job.timeout_ms ?? 5000,
    sslEnabled: job.tls === true,
    logger,
  };
  await (job.mode === 'push' ? runPush : runSimple)(job, options);
  emit({ done: true });
}

main().then(() => process.exit(0), err => {
  process.stderr.write(`consume.mjs failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
