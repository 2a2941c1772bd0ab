"""The bad-input corpus as data: one ``Case`` per bad request, with the exact answer it must get.

Each case names
* the service and RPC (``v2``: apache.rocketmq.v2.MessagingService, ``admin``: pyrmq.admin.v1.Admin,
  ``store``: pyrmq.store.v1.Store, ``remoting``: the remoting door, ``rpc`` the request code's name);
* ``build(ctx)``: the request (``ctx`` holds values the fixture made: a real receipt handle, a
  real recall handle); for Telemetry, the list of commands the client writes;
* ``metadata``: None for the default (``x-mq-client-id`` for v2, nothing for the others);
* ``expected``: a v2 ``Code`` (an int: MessagingService answers in band, ``status.code``, the
  gRPC status stays OK), a ``grpc.StatusCode`` (a gRPC-level refusal: admin, store, Telemetry,
  transport limits), or ``InBand(code)`` for a store RPC that succeeds at the gRPC level and
  carries the refusal in its result (PutMessages' PutResult.status, the pop RPCs' status); for
  ``remoting``, the answer's RocketMQ ``ResponseCode``, and ``remark`` a text its remark must contain;
* ``unchanged``: which parts of ``Cluster.snapshot()`` must not move (all of them by default);
* ``bug``: set when the broker's answer differs from RocketMQ 5's proxy (or from its own
  documented contract): the test is then a strict xfail with this reason.

Topics and groups the cases use exist before the run (conftest.TOPICS, GROUPS): TopicTest
(NORMAL), FifoTopic, DelayTopic, DelayTopic2, TxTopic, PriorityTopic, LiteTopic, OtherTopic; groups G1, G2. An unknown but
legal topic is TOPIC_NOT_FOUND (auto-create is off by default, as in RocketMQ 5's proxy); under
``BROKER_OVERRIDES`` that turn ``auto_create_topic_enable`` on, no case may name one on an
auto-creating path (send, route, receive, assignment): that would create it.

``CASES`` is the list (cases.py); the cases are in corpus_v2.py (MessagingService),
corpus_admin_store.py (Admin, Store) and corpus_remoting.py (the remoting door); ``tests/badinput/test_corpus.py`` runs them. Add a case
next to the others of its RPC; ids must stay unique (checked here, at import).
"""

from __future__ import annotations

from tests.badinput import corpus_admin_store, corpus_remoting, corpus_v2  # noqa: F401  (each fills CASES)
from tests.badinput.cases import CASES, Case, InBand

__all__ = ["CASES", "Case", "InBand"]

_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), sorted({i for i in _ids if _ids.count(i) > 1})
