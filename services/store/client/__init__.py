"""The one client of the store's API (``pyrmq.store.v1.Store``), for every caller of the store.

``StoreClient`` (``client.py``) holds every call (a typed method of ``rpcs.py``) and its
conversions between protobuf and the plain types of ``model.py``; it speaks through a transport
(``transport.py``): gRPC to a store process (``GrpcStoreClient``), or the store's own servicer in
this process (``LocalStoreClient`` in ``services/store/local_client.py``, for tests and tools:
outside this package, because it imports the store engine, so a process that talks gRPC loads
none of it). Every failure is a ``StoreError`` (``errors.py``). Callers (broker, scheduler,
txcheck, admin, pipeline) depend on narrow protocols of their own that name the calls they make;
this package imports nothing of theirs.
"""
