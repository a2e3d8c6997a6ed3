"""Shared state in Redis: the key schema, the service registry, request records and the
shared token-recycling table. Values are plain strings, integers and packed int32 arrays;
nothing is pickled."""
