"""S3-compatible object storage as a cache, through boto3: ``s3://bucket/prefix?endpoint_url=…``.

This module owns :class:`S3Backend`. One object per key under ``<prefix><namespace>``.
Options choose the two things django-s3-cache does differently from a plain blob store,
so each one's cost can be measured on its own:

- ``key_naming=raw`` (object name = the key) or ``sha1`` (the part after the namespace is
  replaced by its SHA-1 hex digest plus ``.djcache``, as django-s3-cache names files);
- ``encoding=raw`` (the body is the value; the expiry travels as object metadata) or
  ``pickle`` (the body is a pickled expiry time followed by zlib-compressed pickled value,
  as Django's file-based cache and django-s3-cache write it);
- ``max_entries=N`` (with ``cull_frequency``, default 3): before every write, LIST the
  namespace and, when it holds ``N`` objects or more, delete a random ``1/cull_frequency``
  of them — django-s3-cache's cull, whose LIST cost grows with the cache.

Other parameters: ``region``, ``aws_access_key_id``/``aws_secret_access_key`` (else boto3's
usual credential chain), ``addressing=path|virtual`` (default path when an endpoint is
given), ``retries`` (extra attempts, default 0: a retried request would hide an error
inside a slower success), ``connect_timeout``/``read_timeout`` (s), and ``emulator`` (set
by ``spawn:s3``; carried into :meth:`S3Backend.info` so reports can say so).
S3 cannot say whether a DELETE removed anything, so :meth:`delete` always returns True.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import random
import time
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import BackendMissing, BackendUnavailable, SpecError
from ..target import Target
from .base import Backend, Capabilities, CleanupFailed, cleanup_failed

_EXPIRES = "cm-expires"  # object metadata key (sent as x-amz-meta-cm-expires)
_DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys


class S3Backend(Backend):
    scheme = "s3"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        if not target.hosts or not target.hosts[0][0]:
            raise SpecError(f"{target.redacted}: no bucket (expected s3://bucket/prefix?endpoint_url=...)")
        self.bucket = target.hosts[0][0]
        self.prefix = target.path.lstrip("/")
        if self.prefix and not self.prefix.endswith("/"):
            self.prefix += "/"
        self.key_naming = target.param("key_naming", "raw")
        if self.key_naming not in ("raw", "sha1"):
            raise SpecError(f"{target.redacted}: key_naming={self.key_naming!r}; use raw or sha1")
        self.encoding = target.param("encoding", "raw")
        if self.encoding not in ("raw", "pickle"):
            raise SpecError(f"{target.redacted}: encoding={self.encoding!r}; use raw or pickle")
        self.max_entries = target.int_param("max_entries")
        self.cull_frequency = target.int_param("cull_frequency", 3) or 0
        self.endpoint_url = target.param("endpoint_url")
        self.emulator = target.param("emulator")
        self.client: Any = None
        self._server = ""
        self._root = self.prefix + namespace  # every object of this run lives under it

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists"}),
            emulated={
                "get_many": "one GET per key",
                "set_many": "one PUT per key",
                "incr": "GET + PUT, not atomic",
            },
            ttl=True,
        )

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError as exc:
            raise BackendMissing(f"s3: boto3 is not installed ({exc}); pip install boto3") from None
        self._client_error = ClientError
        t = self.target
        addressing = t.param("addressing", "path" if self.endpoint_url else "auto")
        config = Config(
            region_name=t.param("region") or None,
            connect_timeout=t.float_param("connect_timeout", 5.0),
            read_timeout=t.float_param("read_timeout", 30.0),
            retries={"total_max_attempts": 1 + (t.int_param("retries", 0) or 0), "mode": "standard"},
            s3={"addressing_style": addressing},
            max_pool_connections=4,
        )
        kwargs: dict[str, Any] = {"config": config}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
        if t.param("aws_access_key_id"):
            kwargs["aws_access_key_id"] = t.param("aws_access_key_id")
            kwargs["aws_secret_access_key"] = t.param("aws_secret_access_key")
        where = f"s3 bucket {self.bucket!r}" + (f" at {self.endpoint_url}" if self.endpoint_url else "")
        try:
            client = boto3.session.Session().client("s3", **kwargs)
            response = client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket"):
                raise BackendUnavailable(f"{where}: the bucket does not exist") from None
            if code in ("403", "AccessDenied"):
                raise BackendUnavailable(f"{where}: access denied (check the credentials)") from None
            raise BackendUnavailable(f"{where}: {' '.join(str(exc).split())}") from None
        except BotoCoreError as exc:
            raise BackendUnavailable(f"{where}: {' '.join(str(exc).split())}") from None
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        self._server = headers.get("server", "")
        self.client = client

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def info(self) -> dict[str, Any]:
        import boto3
        import botocore

        out: dict[str, Any] = {
            "client": "boto3",
            "client_version": boto3.__version__,
            "botocore_version": botocore.__version__,
            "server": self._server or None,
            "endpoint": self.endpoint_url or "aws",
            "key_naming": self.key_naming,
            "encoding": self.encoding,
            "max_entries": self.max_entries,
        }
        if self.emulator:
            out["emulator"] = self.emulator
            out["note"] = f"{self.emulator} emulator: absolute latency is not a statement about AWS S3"
        return out

    # -- naming and encoding ---------------------------------------------------------
    def _name(self, key: str) -> str:
        if self.key_naming == "raw":
            return self.prefix + key
        rest = key[len(self.namespace):] if key.startswith(self.namespace) else key
        return self._root + hashlib.sha1(rest.encode()).hexdigest() + ".djcache"

    def _encode(self, value: bytes, expires: float | None) -> tuple[bytes, dict[str, str]]:
        if self.encoding == "raw":
            return value, ({_EXPIRES: repr(expires)} if expires is not None else {})
        # Django's file-based layout: pickled expiry (None = never), then zlib(pickle(value)).
        return pickle.dumps(expires, pickle.HIGHEST_PROTOCOL) + zlib.compress(
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        ), {}

    def _decode(self, body: bytes, metadata: Mapping[str, str]) -> tuple[bytes, float | None]:
        if self.encoding == "raw":
            raw = metadata.get(_EXPIRES)
            return body, (float(raw) if raw else None)
        stream = io.BytesIO(body)
        expires = pickle.load(stream)
        return pickle.loads(zlib.decompress(stream.read())), expires

    def _missing(self, exc: Exception) -> bool:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        return code in ("NoSuchKey", "404", "NotFound")

    # -- operations ------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        name = self._name(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=name)
        except self._client_error as exc:
            if self._missing(exc):
                return None
            raise
        value, expires = self._decode(response["Body"].read(), response.get("Metadata", {}))
        if expires is not None and expires <= time.time():
            # Like Django's file cache: an expired entry is removed by the read that finds it.
            self.client.delete_object(Bucket=self.bucket, Key=name)
            return None
        return value

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        if self.max_entries is not None:
            self._cull()
        body, metadata = self._encode(value, None if ttl is None else time.time() + ttl)
        self.client.put_object(Bucket=self.bucket, Key=self._name(key), Body=body, Metadata=metadata)

    def delete(self, key: str) -> bool:
        self.client.delete_object(Bucket=self.bucket, Key=self._name(key))
        return True

    def exists(self, key: str) -> bool:
        if self.encoding == "pickle":
            return self.get(key) is not None  # the expiry is inside the body
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._name(key))
        except self._client_error as exc:
            if self._missing(exc):
                return False
            raise
        raw = response.get("Metadata", {}).get(_EXPIRES)
        return raw is None or float(raw) > time.time()

    def incr(self, key: str, delta: int = 1) -> int:
        current = self.get(key)
        number = (int(current) if current is not None else 0) + delta
        self.set(key, str(number).encode())
        return number

    # -- namespace listing: the cull and the cleanup ------------------------------------
    def _list(self) -> list[str]:
        names: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._root):
            names.extend(obj["Key"] for obj in page.get("Contents", ()))
        return names

    def _delete_names(self, names: list[str]) -> int:
        removed = 0
        for start in range(0, len(names), _DELETE_BATCH):
            batch = names[start:start + _DELETE_BATCH]
            response = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": n} for n in batch], "Quiet": True}
            )
            removed += len(batch) - len(response.get("Errors", ()))
        return removed

    def _cull(self) -> None:
        names = self._list()
        assert self.max_entries is not None
        if len(names) < self.max_entries:
            return
        if self.cull_frequency == 0:
            self._delete_names(names)
        else:
            self._delete_names(random.sample(names, len(names) // self.cull_frequency))

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        where = f"s3://{self.bucket}/{self._root}"
        try:
            if self.client is None:
                self.open()
            # Only objects under <prefix><namespace>: never the rest of the bucket.
            names = self._list()
            removed = self._delete_names(names)
        except Exception as exc:  # noqa: BLE001 - boto3 has retried already; say what is left
            raise cleanup_failed(where, exc, f"the objects under {where}") from None
        if removed < len(names):
            raise CleanupFailed(f"cleanup failed: {where}: the server refused to delete "
                                f"{len(names) - removed:,} objects; they remain under {where}")
        return removed
