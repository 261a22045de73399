"""A LIST-then-WATCH cache of one kind of object, as client-go's reflector keeps one (no ``kubernetes`` import).

Re-listing every node each cycle costs the API server and the worker the whole cluster each time (a 5,000-node
LIST is well over 100 MiB of JSON). An :class:`Informer` lists once, in pages, then watches from the list's
resourceVersion in a daemon thread and applies each event to an in-memory store; readers take the store.

What it does, and where client-go does the same (k8s.io/client-go/tools/cache/reflector.go):

- **list in pages** of ``page_size`` (reflector.go ``ListAndWatch`` lists through tools/pager with
  ``Limit: 500``); a continue token that expires mid-list (410) falls back to one unpaged list, as
  pager.go's ``FullListIfExpired`` does; the store is replaced whole when the list is complete
  (``syncWith`` → ``store.Replace``);
- **watch from the list's resourceVersion** with ``allowWatchBookmarks`` and a server-side ``timeoutSeconds``
  (reflector.go asks a random 5–10 minutes); ADDED and MODIFIED replace the object, DELETED removes it, BOOKMARK
  only moves the resourceVersion on. A watch that ends at its timeout is opened again from the last version, no
  list (``watchHandler`` returns nil);
- **relist on 410** (an ERROR event with a Status of code 410, or the watch request answered 410: reflector.go
  ``isExpiredError``), at once; any other failure (a broken stream, a refused connection, a 5xx) relists after
  a backoff that doubles up to ``max_backoff_s`` and resets once a list succeeds (reflector.go's
  ``backoffManager``: 800 ms doubling to 30 s);
- **readers wait for the first sync** (``HasSynced``) up to ``sync_timeout_s``, then get
  :class:`~scheduler.errors.GatewayRetryable`; :meth:`Informer.wait_for` waits until the store has applied a
  given resourceVersion (a write of this process, or the version the server reported for a consistent read).

An ``index`` (a function of an object, as one of client-go's ``Indexers``: tools/cache/index.go, read with
``ByIndex`` in tools/cache/thread_safe_store.go) keeps the store's keys by that function's value, so a reader
asks for one job's pods without walking every pod of the cluster.

The store keeps what ``compact`` leaves of each object (the gateway keeps only the fields it reads: no
``managedFields``, no image lists) with its strings interned, so 5,000 nodes' identical label keys and values
are held once.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from scheduler.errors import GatewayRetryable

logger = logging.getLogger(__name__)

PAGE_SIZE = 500


class Expired(Exception):
    """The API server answered 410: the resourceVersion or continue token is too old; list again."""


class SourceGone(Exception):
    """The list and watch calls have no client any more (it was dropped): the informer stops."""


_running: weakref.WeakSet[Informer] = weakref.WeakSet()


def stop_all() -> None:
    """Stop every informer of this process (the emulator of a test is gone, and with it every cache's server)."""
    for informer in list(_running):
        informer.stop()


class ListWatch(Protocol):
    """The two API calls an informer makes (:class:`~scheduler.gateways.kube.client.KubeClient` supplies them)."""

    def list_page(self, *, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """One page of the list (raw JSON); raises :class:`Expired` on 410."""
        ...

    def watch(self, *, resource_version: str, timeout_s: int) -> Iterator[Mapping[str, Any]]:
        """The watch events after ``resource_version`` (raw JSON), until the server ends the stream."""
        ...


def version_number(resource_version: str | None) -> int | None:
    """A resourceVersion as the number it is on an etcd-backed server (the etcd revision), None if it is not one."""
    try:
        return int(resource_version or "")
    except ValueError:
        return None


class Informer:
    """A list-then-watch cache of one resource (module doc). Start with :meth:`start`; read with :meth:`items`."""

    def __init__(
        self,
        what: str,
        source: ListWatch,
        *,
        compact: Callable[[Mapping[str, Any]], dict[str, Any]],
        page_size: int = PAGE_SIZE,
        sync_timeout_s: float = 60.0,
        watch_timeout_s: int = 300,
        backoff_s: float = 0.8,
        max_backoff_s: float = 30.0,
        index: Callable[[Mapping[str, Any]], str] | None = None,
    ) -> None:
        self.what = what
        self.source = source
        self.compact = compact
        self.page_size = page_size
        self.sync_timeout_s = sync_timeout_s
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._store: dict[str, dict[str, Any]] = {}
        self.index = index
        self._indexed: dict[str, set[str]] = {}  # the index's value -> the keys of the objects that have it
        self._version = ""  # the last resourceVersion applied (list, event or bookmark)
        self._changed = threading.Condition()
        self._synced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lists = 0  # how many times the informer listed (first sync and every relist)
        self.last_error = ""  # why it last listed again (kept after the list succeeds: for logs and tests)
        self._failure: BaseException | None = None  # why the last list failed, until one succeeds

    # -- readers -----------------------------------------------------------------------------------------

    def items(self) -> list[dict[str, Any]]:
        """Every object in the store, after the first sync (GatewayRetryable when it does not come in time)."""
        with self._changed:
            self._wait_synced()
            return list(self._store.values())

    def get(self, key: str) -> dict[str, Any] | None:
        """The object of ``key`` (``namespace/name``, or the name of a cluster-wide object), after the first sync."""
        with self._changed:
            self._wait_synced()
            return self._store.get(key)

    def indexed(self, value: str) -> list[dict[str, Any]]:
        """The objects whose ``index`` is ``value``, after the first sync (an informer without an index: none)."""
        with self._changed:
            self._wait_synced()
            return [self._store[key] for key in sorted(self._indexed.get(value, ()))]

    def _wait_synced(self) -> None:
        """Called holding ``_changed``: return once the first list is in the store (module doc)."""
        self.start()
        if not self._changed.wait_for(lambda: self._synced or self._failure is not None, self.sync_timeout_s):
            raise GatewayRetryable(f"the {self.what} cache has not synced within {self.sync_timeout_s:g} s")
        if not self._synced and self._failure is not None:
            # The list failed (after KubeClient's own retries): say why now, rather than after the timeout;
            # the thread lists again after its backoff.
            raise self._failure

    @property
    def resource_version(self) -> str:
        return self._version

    def wait_for(self, resource_version: str | None, timeout_s: float) -> bool:
        """Wait until the store has applied ``resource_version`` (or a later one); False on timeout. A version
        that is not a number (not an etcd-backed server) cannot be compared: True at once."""
        wanted = version_number(resource_version)
        if wanted is None:
            return True
        self.start()
        with self._changed:
            return self._changed.wait_for(
                lambda: self._synced and (version_number(self._version) or 0) >= wanted, timeout_s
            )

    # -- the thread --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name=f"informer {self.what}", daemon=True)
            self._thread.start()
            _running.add(self)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._list()
                failures = 0
                while not self._stop.is_set():
                    self._watch()  # returns when the server ends the stream at its timeout: watch again
            except SourceGone:
                return
            except Expired as exc:
                logger.info("%s: %s; listing again", self.what, exc)
                self.last_error = str(exc)
            except Exception as exc:  # a broken stream, a refused connection, a 5xx: back off, then list again
                failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                with self._changed:
                    self._failure = exc
                    self._changed.notify_all()
                delay = min(self.backoff_s * 2 ** (failures - 1), self.max_backoff_s)
                delay *= 1 + random.random() * 0.1  # jitter, so workers do not relist in step
                logger.warning("%s: %s; listing again in %.1f s", self.what, self.last_error, delay)
                self._stop.wait(delay)

    def _list(self) -> None:
        store: dict[str, dict[str, Any]] = {}
        token: str | None = None
        limit = self.page_size
        version = ""
        while True:
            try:
                page = self.source.list_page(limit=limit, continue_token=token)
            except Expired:
                if token is None:
                    raise
                # pager.go FullListIfExpired: the token expired mid-list; list everything in one go instead.
                store, token, limit = {}, None, 0
                continue
            if token is None:
                version = str((page.get("metadata") or {}).get("resourceVersion") or "")
            for raw in page.get("items") or []:
                obj = self.compact(raw)
                store[key_of(obj)] = obj
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                break
        indexed: dict[str, set[str]] = {}
        if self.index is not None:
            for key, obj in store.items():
                indexed.setdefault(self.index(obj), set()).add(key)
        with self._changed:
            self._store, self._indexed = store, indexed
            self._version, self._synced, self._failure = version, True, None
            self.lists += 1
            self._changed.notify_all()

    def _watch(self) -> None:
        for event in self.source.watch(resource_version=self._version, timeout_s=self.watch_timeout_s):
            if self._stop.is_set():
                return
            kind, raw = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if raw.get("code") == 410:
                    raise Expired(str(raw.get("message") or "resource version too old"))
                raise RuntimeError(f"watch error {raw.get('code')}: {raw.get('message')}")
            version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
            with self._changed:
                if kind in ("ADDED", "MODIFIED"):
                    obj = self.compact(raw)
                    self._unindex(key_of(obj))
                    self._store[key_of(obj)] = obj
                    if self.index is not None:
                        self._indexed.setdefault(self.index(obj), set()).add(key_of(obj))
                elif kind == "DELETED":
                    self._unindex(key_of(raw))
                    self._store.pop(key_of(raw), None)
                if version:
                    self._version = version
                self._changed.notify_all()

    def _unindex(self, key: str) -> None:
        """Called holding ``_changed``: take the stored object of ``key`` out of the index (before it changes)."""
        old = self._store.get(key)
        if old is None or self.index is None:
            return
        keys = self._indexed.get(self.index(old))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._indexed[self.index(old)]


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def interned(value: Any) -> Any:
    """``value`` with every string key and value interned (thousands of nodes share their label keys and values)."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interned(v) for v in value]
    return value


_NODE_META = ("name", "uid", "resourceVersion", "labels", "annotations", "creationTimestamp", "deletionTimestamp")
_NODE_STATUS = ("conditions", "allocatable", "capacity")
_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")


def compact_node(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What the gateway reads of a node (labels, annotations, spec, conditions, allocatable and capacity): a real
    node's images, addresses, nodeInfo, volumes and managedFields are most of its size and nothing here reads them."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    node: dict[str, Any] = {
        "metadata": {k: meta[k] for k in _NODE_META if k in meta},
        "spec": dict(raw.get("spec") or {}),
        "status": {k: status[k] for k in _NODE_STATUS if k in status},
    }
    conditions = node["status"].get("conditions")
    if conditions:
        node["status"]["conditions"] = [{k: c[k] for k in _CONDITION if k in c} for c in conditions]
    return interned(node)


def compact_slice(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceSlice without its managedFields (the devices and their attributes are what the gateway reads)."""
    meta = {k: v for k, v in (raw.get("metadata") or {}).items() if k != "managedFields"}
    return interned({"metadata": meta, "spec": raw.get("spec") or {}})


def compact_claim(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaim without its managedFields (a bind reads its name and its allocation's devices)."""
    meta = {k: v for k, v in (raw.get("metadata") or {}).items() if k != "managedFields"}
    return interned({**raw, "metadata": meta})


def compact_pod(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A pod without its managedFields (Microcosm's own pods: the gateway reads most of the rest)."""
    meta = {k: v for k, v in (raw.get("metadata") or {}).items() if k != "managedFields"}
    return interned({**raw, "metadata": meta})
