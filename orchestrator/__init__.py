"""The orchestrator: the control plane. It validates and admits requests, keeps their state in
Redis, routes them to a verifier and a drafter, streams tokens to clients, and resumes a request
on another verifier when one is lost. It imports no torch."""
