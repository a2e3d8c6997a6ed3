"""The token-recycling table shared by every drafter replica of a model, through Redis.

Glossary (papers.md §11): the table is `vocab × 8` successor rows. In Redis it is a hash
(token id -> 8 packed int32) plus a log stream of row updates; every update is written to both
in one atomic script, so replaying the log in order gives the hash. A replica applies its own
rows at once (its next tree uses them), then follows the log and applies every entry in log
order, its own included: after quiescence every replica's table equals the hash. A new replica
loads the hash (warm start) and follows the log from the id it read first. Redis being down
only stops the sharing; drafting goes on from the local table.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import numpy as np
import redis.asyncio as aioredis

from specmesh.drafting.recycling import RecyclingTable
from specmesh.store.keys import Keys

log = logging.getLogger("specmesh.drafter.table")
LOG_MAXLEN = 100_000

_PUBLISH = """
for i = 1, #ARGV - 3, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[#ARGV], '*', 'tokens', ARGV[#ARGV - 2], 'rows', ARGV[#ARGV - 1])
"""


class SharedTable:
    def __init__(self, client: aioredis.Redis, keys: Keys, model_id: str, vocab_size: int):
        self.client, self.model_id, self.vocab_size = client, model_id, vocab_size
        self.table = RecyclingTable(vocab_size)
        self.hash_key, self.log_key = keys.recycling_table(model_id), keys.recycling_log(model_id)
        self.replica = uuid.uuid4().hex[:8]
        self.last_id = "0-0"
        self._publish = client.register_script(_PUBLISH)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    async def load(self) -> None:
        """Warm start from the hash, then follow the log from before the read."""
        newest = await self.client.xrevrange(self.log_key, count=1)
        self.last_id = newest[0][0].decode() if newest else "0-0"
        rows = await self.client.hgetall(self.hash_key)
        if rows:
            tokens = np.array([int(t) for t in rows], dtype=np.int64)
            values = np.stack([np.frombuffer(v, dtype="<i4") for v in rows.values()]).astype(np.int64)
            self.table.update(tokens, values)

    def publish(self, tokens: np.ndarray, rows: np.ndarray) -> None:
        """Rows this replica already applied locally: to Redis by the next `flush`."""
        self._pending.append((tokens, rows))

    async def flush(self) -> None:
        while self._pending:
            tokens, rows = self._pending[0]
            packed_rows = np.ascontiguousarray(rows, dtype="<i4")
            args = [a for t, r in zip(tokens.tolist(), packed_rows) for a in (str(t), r.tobytes())]
            args += [np.asarray(tokens, dtype="<i4").tobytes(), packed_rows.tobytes(), LOG_MAXLEN]
            await self._publish(keys=[self.hash_key, self.log_key], args=args)
            self._pending.pop(0)

    async def follow(self) -> None:
        """Apply the log in order, forever; publish this replica's rows in between."""
        while True:
            try:
                await self.flush()
                entries = await self.client.xread({self.log_key: self.last_id}, block=100, count=500)
                for _, messages in entries:
                    for entry_id, fields in messages:
                        self._apply_entry(fields)
                        self.last_id = entry_id.decode()
            except aioredis.RedisError as error:
                log.warning("recycling table sync paused: %s", error)
                await asyncio.sleep(1.0)

    def _apply_entry(self, fields: dict) -> None:
        tokens = np.frombuffer(fields[b"tokens"], dtype="<i4").astype(np.int64)
        rows = np.frombuffer(fields[b"rows"], dtype="<i4").astype(np.int64).reshape(len(tokens), -1)
        self.table.update(tokens, rows)
