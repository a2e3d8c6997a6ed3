"""LocalStack.forget: the stack of a benchmark or a test deletes its keys from the shared Redis
once it has stopped, and only its own."""

import uuid

from specmesh.stack import LocalStack, StackConfig
from specmesh.store.keys import redis_url


def test_forget_deletes_the_stack_keys_and_no_others(redis_client):
    mine, other = f"test-{uuid.uuid4().hex[:10]}", f"test-{uuid.uuid4().hex[:10]}"
    redis_client.set(f"{mine}:req:a", 1)
    redis_client.rpush(f"{mine}:req:a:tokens", 7, 8)
    redis_client.set(f"{other}:req:a", 1)
    redis_client.set(f"{mine}x:req:a", 1)  # a prefix that merely starts the same
    try:
        LocalStack(StackConfig(redis_prefix=mine), redis_url=redis_url()).forget()
        assert not list(redis_client.scan_iter(f"{mine}:*"))
        assert redis_client.get(f"{other}:req:a") == b"1" and redis_client.get(f"{mine}x:req:a") == b"1"
    finally:
        redis_client.delete(f"{other}:req:a", f"{mine}x:req:a")
