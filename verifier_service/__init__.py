"""The verifier service: holds the target model and its KV slots, batches every session whose
draft tree is ready into one forward pass, and streams step events to the orchestrator."""
