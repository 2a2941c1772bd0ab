"""The gRPC side of pyrmq's etcd client: the client itself (client.py) and its watches and lease
keepalives (streams.py)."""
