"""Store test fixtures, defined in tests/support/:

* ``clock`` (a ManualClock) and ``make_store`` (started FileStores on ``small_config``, shut
  down after the test): tests/support/filestore.py;
* ``open_store`` / ``store``: a FileStore with the pop revive loop halted
  (tests/support/store_pop.py);
* ``served``: a FileStore behind the store's gRPC server on 127.0.0.1:0
  (tests/support/store_rpc.py; test_pop_rpc.py and test_pop_sql.py use their own ``served``,
  tests/support/store_pop_rpc.py).
"""

from __future__ import annotations

from tests.support.filestore import clock, make_store  # noqa: F401 - fixtures
from tests.support.store_pop import open_store, store  # noqa: F401 - fixtures
from tests.support.store_rpc import served  # noqa: F401 - fixture
