"""The drafter service: proposes draft trees for verifier sessions (any drafter from
specmesh.drafting) and keeps the token-recycling table shared between replicas through Redis."""
