"""The API server's LIST and WATCH, as kube-apiserver serves them, over kmock's object store.

kmock stores objects and serves a plain list without versions; the gateway's informer needs what the real API
server adds, so this interceptor serves every collection GET of the core resources the emulator keeps:

- **one global revision.** Every write gets the next value of one increasing counter (etcd's revision) as its
  ``metadata.resourceVersion``, and a new object a ``metadata.uid``. Upstream: a resourceVersion *is* the etcd
  ModRevision (k8s.io/apiserver/pkg/storage/etcd3/store.go, ``versioner.UpdateObject(obj, uint64(kv.ModRevision))``).
  The harness learns of writes by comparing each object's kmock history length with what it last saw
  (:meth:`ApiServer.sync`), so writes kmock makes itself (binding, eviction, direct seeding) are versioned too;
- **LIST** (``limit``, ``continue``, ``labelSelector``, ``fieldSelector``): items in key order (etcd keys are
  ``/registry/<resource>/<namespace>/<name>``), ``metadata.resourceVersion`` the revision of the first page and
  ``metadata.continue`` an opaque token (base64 JSON of ``{"v": "meta.k8s.io/v1", "rv": …, "start": …}``, as
  storage/etcd3/store.go's ``encodeContinue`` writes it). A token older than the last compaction answers 410,
  reason ``Expired``, with store.go's message (etcd3 store.go ``getList``: ``ErrCompacted`` →
  ``apierrors.NewResourceExpired``). Later pages read the present state past the token's key, not the snapshot
  at its revision as etcd does: they may show objects newer than the list's resourceVersion, which the watch
  from that version then replays again (an informer applies them idempotently). Selectors are filtered
  server-side (k8s.io/apimachinery/pkg/labels/selector.go: ``=``, ``==``, ``!=``, ``key``, ``!key``;
  fields: ``metadata.name``, ``metadata.namespace``, ``spec.nodeName``, ``status.phase``);
- **WATCH** (``watch=1``): with ``resourceVersion`` "" or "0" the current objects as ADDED first, else the events
  after that version replayed from a bounded history (the watch cache, apiserver/pkg/storage/cacher/watch_cache.go),
  then streamed as they happen. A version older than the history answers, as the cacher does, HTTP 200 and one
  ERROR event carrying a Status 410 ``Expired`` "too old resource version: X (Y)" (watch_cache.go
  ``getAllEventsSinceLocked``; cacher.go returns ``newErrWatcher(err)``, and endpoints/handlers/watch.go writes
  its ERROR event into the open stream). An object that starts or stops matching the selector arrives as ADDED
  or DELETED (cacher/cache_watcher.go ``convertToWatchEvent``). ``allowWatchBookmarks`` sends BOOKMARK events
  (an object with the kind and only ``metadata.resourceVersion``) every ``bookmark_interval_s`` — the real cacher
  sends one about a minute apart per watcher (cacher.go ``bookmarkFrequency``) and just before the timeout;
  ``timeoutSeconds`` ends the stream (default 1800 s, the server's ``--min-request-timeout`` doubled at most).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp.web

if TYPE_CHECKING:
    from tests.scheduler.kube_emulator import GatewayEmulator

_COLLECTION = re.compile(r"^/(?:api/v1|apis/[^/]+/[^/]+)/(?:namespaces/([^/]+)/)?([a-z]+)/?$")
# The resources the emulator's store keeps (namespaces are served from their own dict, not the store); the last
# three before DRA's are the autoscalers' (a node request's PodTemplate, the Cluster Autoscaler's ProvisioningRequest
# CRD, Karpenter's NodeClaim CRD), served under /apis/<group>/<version> as the API server serves a CRD; the last three
# are DRA's resource.k8s.io/v1 ResourceSlices, DeviceClasses and ResourceClaims (kube_harness/resource_claims.py),
# built into the API server since 1.34.
SERVED = {"pods": "Pod", "nodes": "Node", "configmaps": "ConfigMap", "persistentvolumeclaims": "PersistentVolumeClaim",
          "secrets": "Secret", "services": "Service", "podtemplates": "PodTemplate",
          "provisioningrequests": "ProvisioningRequest", "nodeclaims": "NodeClaim",
          "resourceslices": "ResourceSlice", "deviceclasses": "DeviceClass",
          "resourceclaims": "ResourceClaim"}  # fmt: skip
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)  # k8s.io/apiserver/pkg/storage/etcd3/store.go
DEFAULT_WATCH_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Event:
    """One change, as the watch cache keeps it (watchCacheEvent: the object and the one before it)."""

    revision: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: Mapping[str, Any]
    previous: Mapping[str, Any] | None


@dataclass
class ApiServer:
    """The versions, the watch history and the served bytes of one emulated API server (module doc)."""

    history: int = 1000  # events the watch cache keeps (cacher: between 100 and 100 Ki, sized by load)
    bookmark_interval_s: float = 60.0
    poll_s: float = 0.02  # how often an open watch looks for new revisions
    revision: int = 1
    compacted: int = 0  # the etcd compaction point: continue tokens at or below it have expired
    events: collections.deque[Event] = field(default_factory=collections.deque)
    forgotten: int = 0  # the newest revision dropped from the history (watch_cache.go's ``oldest - 1``)
    served_bytes: collections.Counter[str] = field(default_factory=collections.Counter)  # "list"/"watch"
    served_requests: collections.Counter[str] = field(default_factory=collections.Counter)
    _seen: dict[Any, tuple[int, int, Mapping[str, Any] | None]] = field(default_factory=dict)
    _log_length: int = -1
    _changed_at: float = 0.0
    _waiters: list[asyncio.Event] = field(default_factory=list)
    closed: bool = False  # the server is shutting down: open watches end
    generation: int = 0  # :meth:`end_watches` moves it on: the watches opened before end

    # -- versions ---------------------------------------------------------------------------------------

    def sync(self, emulator: GatewayEmulator, *, force: bool = False) -> None:
        """Give every write since the last call its revision, and record it as a watch event.

        Cheap when nothing was requested since: a write always comes with a request (or with ``force``, after
        seeding the store directly)."""
        now = time.monotonic()
        if len(emulator.log) != self._log_length:
            self._log_length, self._changed_at = len(emulator.log), now
        elif not force and now - self._changed_at > 1.0:
            return  # no request for a second: kmock has finished every write it was asked for
        changed = False
        objects: dict[Any, Any] = emulator.objects._objects  # kmock's own dict: no copies
        for key, obj in objects.items():
            length = len(obj.history)
            seen = self._seen.get(key)
            if seen is not None and seen[0] == length:
                continue
            changed = True
            before = seen[2] if seen is not None else None
            plural = key[0].plural
            if obj.deleted:
                if before is not None:
                    self.revision += 1
                    gone = {**before, "metadata": {**before["metadata"], "resourceVersion": str(self.revision)}}
                    self._record(Event(self.revision, plural, "DELETED", gone, before))
                self._seen[key] = (length, self.revision, None)
                continue
            self.revision += 1
            current = obj.last.raw  # a shallow copy sharing kmock's nested dicts: metadata is stamped in place
            meta = current.setdefault("metadata", {})
            meta["resourceVersion"] = str(self.revision)
            if key[1] and not meta.get("namespace"):  # the server fills it from the URL (rest.BeforeCreate)
                meta["namespace"] = key[1]
            if before is None or not meta.get("uid"):
                meta["uid"] = str(uuid.uuid4())
            self._record(Event(self.revision, plural, "ADDED" if before is None else "MODIFIED", current, before))
            self._seen[key] = (length, self.revision, current)
        for key in [k for k in self._seen if k not in objects]:  # hard-deleted from kmock's dict
            length, _rv, before = self._seen.pop(key)
            if before is not None:
                self.revision += 1
                gone = {**before, "metadata": {**before["metadata"], "resourceVersion": str(self.revision)}}
                self._record(Event(self.revision, key[0].plural, "DELETED", gone, before))
                changed = True
        if changed:
            for waiter in self._waiters:
                waiter.set()

    def _record(self, event: Event) -> None:
        self.events.append(event)
        while len(self.events) > self.history:
            self.forgotten = self.events.popleft().revision

    def compact(self) -> None:
        """What etcd's periodic compaction does (kube-apiserver ``--etcd-compaction-interval``, 5 min by
        default): every continue token issued so far expires."""
        self.compacted = self.revision

    def end_watches(self) -> None:
        """End every open watch cleanly, as an API server's restart or a load balancer's idle cut does."""
        self.generation += 1

    def forget_history(self) -> None:
        """The watch cache rolls over: every version up to now is too old to watch from."""
        self.events.clear()
        self.forgotten = self.revision

    # -- the interceptor -----------------------------------------------------------------------------------

    async def __call__(
        self, emulator: GatewayEmulator, raw: aiohttp.web.BaseRequest
    ) -> aiohttp.web.StreamResponse | None:
        self.sync(emulator)
        match = _COLLECTION.match(raw.path)
        if raw.method != "GET" or match is None or match.group(2) not in SERVED:
            return None
        namespace, plural = match.group(1), match.group(2)
        if plural != "pods" and plural != "nodes" and namespace is None and plural not in SERVED:
            return None
        try:
            labels = label_selector(raw.query.get("labelSelector", ""))
            fields = field_selector(raw.query.get("fieldSelector", ""))
        except ValueError as exc:
            return _status(400, "BadRequest", str(exc))

        def wanted(obj: Mapping[str, Any] | None) -> bool:
            if obj is None:
                return False
            meta = obj.get("metadata") or {}
            if namespace is not None and meta.get("namespace") != namespace:
                return False
            return labels(meta.get("labels") or {}) and fields(obj)

        if raw.query.get("watch") in ("1", "true"):
            return await self._watch(emulator, raw, plural, wanted)
        return self._list(emulator, raw, plural, wanted)

    def _list(
        self,
        emulator: GatewayEmulator,
        raw: aiohttp.web.BaseRequest,
        plural: str,
        wanted: Callable[[Mapping[str, Any] | None], bool],
    ) -> aiohttp.web.StreamResponse:
        limit = int(raw.query.get("limit") or 0)
        token = raw.query.get("continue")
        list_rv, start = self.revision, ""
        if token:
            try:
                decoded = json.loads(base64.b64decode(token))
                list_rv, start = int(decoded["rv"]), str(decoded["start"])
            except (ValueError, KeyError, TypeError):
                return _status(400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion")
            if list_rv <= self.compacted:
                fresh = _continue_token(self.revision, start)  # store.go offers an inconsistent continuation
                response = _status(410, "Expired", CONTINUE_TOO_OLD)
                body = json.loads(response.body)  # type: ignore[arg-type]
                body["metadata"] = {"continue": fresh}
                return aiohttp.web.json_response(body, status=410)
        live = sorted(
            (_key(obj), obj)
            for key, obj in ((k, o) for k, o in self._current(emulator, plural))
            if wanted(obj) and _key(obj) >= start
        )
        page = live[:limit] if limit > 0 else live
        metadata: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit > 0 and len(live) > limit:
            metadata["continue"] = _continue_token(list_rv, page[-1][0] + "\x00")
            metadata["remainingItemCount"] = len(live) - limit
        body = json.dumps(
            {
                "kind": f"{SERVED[plural]}List",
                "apiVersion": _api_version(raw.path),
                "metadata": metadata,
                "items": [o for _k, o in page],
            }
        ).encode()
        self.served_bytes["list"] += len(body)
        self.served_requests["list"] += 1
        return aiohttp.web.Response(body=body, content_type="application/json")

    def _current(self, emulator: GatewayEmulator, plural: str) -> Iterable[tuple[Any, Mapping[str, Any]]]:
        for key, (_length, _rv, obj) in self._seen.items():
            if obj is not None and key[0].plural == plural:
                yield key, obj

    async def _watch(
        self,
        emulator: GatewayEmulator,
        raw: aiohttp.web.BaseRequest,
        plural: str,
        wanted: Callable[[Mapping[str, Any] | None], bool],
    ) -> aiohttp.web.StreamResponse:
        self.served_requests["watch"] += 1
        timeout = float(raw.query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT_S)
        bookmarks = raw.query.get("allowWatchBookmarks") in ("1", "true")
        version = raw.query.get("resourceVersion") or "0"
        stream = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await stream.prepare(raw)

        async def send(event: Mapping[str, Any]) -> None:
            line = json.dumps(event).encode() + b"\n"
            self.served_bytes["watch"] += len(line)
            await stream.write(line)

        if version == "0":
            sent = self.revision
            for _obj_key, obj in sorted(self._current(emulator, plural), key=lambda item: _key(item[1])):
                if wanted(obj):
                    await send({"type": "ADDED", "object": obj})
        else:
            sent = int(version)
            if sent < self.forgotten:
                message = f"too old resource version: {sent} ({self.forgotten})"
                status = json.loads(_status(410, "Expired", message).body)  # type: ignore[arg-type]
                await send({"type": "ERROR", "object": status})
                await stream.write_eof()
                return stream
        waiter = asyncio.Event()
        self._waiters.append(waiter)
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_interval_s
        told = sent  # the newest version the client has been given (by an event or a bookmark)
        generation = self.generation
        try:
            while True:
                for event in [e for e in self.events if e.revision > sent and e.plural == plural]:
                    now_in, was_in = wanted(event.obj), wanted(event.previous)
                    kind = event.type
                    if event.type == "MODIFIED" and now_in != was_in:
                        kind = "ADDED" if now_in else "DELETED"
                    if now_in or (was_in and kind == "DELETED"):
                        await send({"type": kind, "object": event.obj})
                        told = event.revision
                    sent = event.revision
                now = time.monotonic()
                if self.closed or self.generation != generation:
                    break
                if now >= deadline:
                    if bookmarks:  # cacher: a last bookmark before the timeout, so the client resumes from it
                        await send(_bookmark(plural, self.revision))
                    break
                if bookmarks and now >= next_bookmark and self.revision > told:
                    await send(_bookmark(plural, self.revision))
                    told = sent = max(sent, self.revision)
                    next_bookmark = now + self.bookmark_interval_s
                waiter.clear()
                try:
                    await asyncio.wait_for(waiter.wait(), min(self.poll_s, max(deadline - now, 0.001)))
                except TimeoutError:
                    self.sync(emulator)
        except ConnectionResetError:  # the client went away (closed its watch): nothing more to send
            return stream
        finally:
            self._waiters.remove(waiter)
        await stream.write_eof()
        return stream


def install(emulator: GatewayEmulator, server: ApiServer) -> None:
    """Serve LIST and WATCH from ``server`` and version every write before kmock answers it: kmock announces each
    write it makes on a per-resource bus before it renders the response, so the write's response (the created or
    patched object) carries its resourceVersion, as the real server's does."""
    from kmock._internal import aiobus  # the emulator's own bus class

    class VersioningBus(aiobus.Bus[Any]):
        async def put(self, *items: Any) -> None:
            server.sync(emulator, force=True)
            await super().put(*items)

    emulator._buses = collections.defaultdict(VersioningBus)  # kmock has no hook for this
    emulator.interceptors.insert(0, server)


def _bookmark(plural: str, revision: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": SERVED[plural], "apiVersion": "v1",
                                           "metadata": {"resourceVersion": str(revision)}}}  # fmt: skip


def _api_version(path: str) -> str:
    """The group/version a collection's path names (``/apis/resource.k8s.io/v1/…`` → ``resource.k8s.io/v1``)."""
    parts = path.split("/")
    return f"{parts[2]}/{parts[3]}" if parts[1] == "apis" else "v1"


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _continue_token(revision: int, start: str) -> str:
    return base64.b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start}).encode()).decode()


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return aiohttp.web.json_response(body, status=code)


def label_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """A label selector's test (apimachinery labels/selector.go; set-based ``in``/``notin`` are not parsed)."""
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if " in " in part or " notin " in part or "(" in part:
            raise ValueError(f"unable to parse requirement: set-based selector {part!r} is not emulated")
        if "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif part.startswith("!"):
            tests.append(lambda labels, k=part[1:]: k not in labels)
        else:
            tests.append(lambda labels, k=part: k in labels)
    return lambda labels: all(test(labels) for test in tests)


_FIELDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda o: (o.get("metadata") or {}).get("name") or "",
    "metadata.namespace": lambda o: (o.get("metadata") or {}).get("namespace") or "",
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName") or "",
    "status.phase": lambda o: (o.get("status") or {}).get("phase") or "",
    # A ResourceSlice's selectable fields (staging/src/k8s.io/api/resource/v1/types.go ResourceSliceSelector*).
    "spec.driver": lambda o: (o.get("spec") or {}).get("driver") or "",
    "spec.pool.name": lambda o: ((o.get("spec") or {}).get("pool") or {}).get("name") or "",
}


def field_selector(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """A field selector's test: the fields the API server indexes for pods and nodes (registry/core/pod/strategy.go
    ``ToSelectableFields``) and ResourceSlices; an unknown field is refused with 400, as the server does."""
    tests: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        negate = "!=" in part
        name, value = (s.strip() for s in re.split(r"!=|==|=", part, maxsplit=1))
        if name not in _FIELDS:
            raise ValueError(f"field label not supported: {name}")
        read = _FIELDS[name]
        tests.append(lambda obj, r=read, v=value, n=negate: (r(obj) != v) if n else (r(obj) == v))
    return lambda obj: all(test(obj) for test in tests)
