// Send messages with the official rocketmq-client-nodejs and print one JSON line per message.
// The Node.js twin of ../send.py (same job and output), driven by tests/broker/test_nodejs_client.py:
//
//     node send.mjs '{"endpoint": "127.0.0.1:8081", "topics": ["T"], "messages": [{...}, ...]}'
//
// Message fields: topic, body (text) or body_size (bytes of "x"), tag, keys (list),
// properties (object), message_group, delay_ms (deliver that long after the send) or
// delivery_timestamp_ms (deliver then, ms since the epoch; ../send.py takes seconds),
// transaction ("commit" or "rollback": send as a half message, then end the transaction),
// priority, lite_topic (a LITE topic's message for that lite topic).
// Output per message: {"ok": true, "message_id", "transaction_id", "offset", "recall_handle"}
// or {"ok": false, "error": class name, "message": str, "code": code or null}. A last line
// {"settings": {...}} reports what the producer learned from the server's settings reply.
import definition from 'rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js';
import { Producer } from 'rocketmq-client-nodejs';
import { emit, errorRecord, logger } from './common.mjs';

const { TransactionResolution } = definition;

function build(spec) {
  const message = {
    topic: spec.topic,
    body: spec.body !== undefined ? Buffer.from(spec.body) : Buffer.alloc(spec.body_size, 'x'),
  };
  if (spec.tag) message.tag = spec.tag;
  if (spec.keys) message.keys = spec.keys;
  if (spec.properties) message.properties = new Map(Object.entries(spec.properties));
  if (spec.message_group) message.messageGroup = spec.message_group;
  if (spec.delay_ms) message.delay = spec.delay_ms;
  if (spec.delivery_timestamp_ms) message.deliveryTimestamp = new Date(spec.delivery_timestamp_ms);
  if (spec.priority !== undefined) message.priority = spec.priority;
  if (spec.lite_topic !== undefined) message.liteTopic = spec.lite_topic;
  return message;
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  const producer = new Producer({
    endpoints: job.endpoint,
    namespace: '',
    topics: job.topics ?? [],
    // grpc-js's default roots: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH when set.
    sslEnabled: job.tls === true,
    requestTimeout: job.timeout_ms ?? 5000,
    logger,
    // Checks of orphaned transactions (none expected here: every transaction is ended).
    checker: { check: async () => TransactionResolution.COMMIT },
  });
  await producer.startup();
  try {
    for (const spec of job.messages) {
      let result;
      try {
        let receipt;
        if (spec.transaction) {
          const transaction = producer.beginTransaction();
          receipt = await producer.send(build(spec), transaction);
          await (spec.transaction === 'commit' ? transaction.commit() : transaction.rollback());
        } else {
          receipt = await producer.send(build(spec));
        }
        result = {
          ok: true, message_id: receipt.messageId, transaction_id: receipt.transactionId,
          offset: receipt.offset, recall_handle: receipt.recallHandle,
        };
      } catch (err) {
        result = { ok: false, ...errorRecord(err) };
      }
      emit(result);
    }
    const settings = producer.publishingSettings;
    emit({
      settings: {
        max_body_size: settings.maxBodySizeBytes,
        validate_message_type: settings.isValidateMessageType(),
        max_attempts: settings.retryPolicy.getMaxAttempts(),
      },
    });
  } finally {
    await producer.shutdown();
  }
}

main().then(() => process.exit(0), err => {
  process.stderr.write(`send.mjs failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
