"""A client of pyrmq's v2 API (``apache.rocketmq.v2.MessagingService`` and the admin service on
the broker port) for pyrmq's own tools: the operator commands (``pyrmq send``, ``consume``,
``bench``, ``status``) and the Spark pipeline. Applications use the official RocketMQ clients."""
