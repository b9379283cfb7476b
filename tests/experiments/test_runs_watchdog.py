"""`runs.watchdog.Watchdog.fail`, in one process with an in-memory key-value store: processes
that fail at the same moment (none reads the others' failure: their watchdogs stopped)
end without waiting out the deadline, and process 0, which hosts JAX's coordinator, ends
last (when it goes, JAX's runtime aborts the processes still running, status -6). The runs
of several real processes are in `test_distributed.py`."""

import threading
import time

from experiments.runs import watchdog


class _Store:
    """The calls of JAX's distributed client that the watchdog makes."""

    def __init__(self):
        self.items: dict[str, str] = {}
        self.lock = threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.lock:
            assert allow_overwrite or key not in self.items, key
            self.items[key] = value

    def key_value_dir_get(self, prefix):
        with self.lock:
            return [(k, v) for k, v in self.items.items() if k.startswith(prefix)]


def test_processes_failing_at_once_end_together_process_0_last(monkeypatch):
    ended: list[tuple[int, int]] = []

    def record_exit(message, code):
        ended.append((int(threading.current_thread().name), code))  # (`fail` returns)

    monkeypatch.setattr(watchdog, "_exit", record_exit)
    monkeypatch.setattr(watchdog, "_TELL_WITHIN", 120.0)  # past the join: no one waits it out
    store, count = _Store(), 3
    dogs = [watchdog.Watchdog(i, count, peer_timeout=60) for i in range(count)]
    threads = []
    for dog in dogs:
        dog.client = store
        threads.append(
            threading.Thread(target=dog.fail, args=("bad", 2), name=str(dog.index), daemon=True)
        )
    for thread in threads:  # process 0 first: before the fix, it also ended first
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(ended) == [(0, 2), (1, 2), (2, 2)]
    assert ended[-1] == (0, 2), ended
    assert sorted(k for k in store.items if "/failed/" in k) == [
        f"lra_watchdog/failed/{i}" for i in range(count)
    ]
