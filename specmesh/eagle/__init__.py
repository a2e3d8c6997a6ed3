"""EAGLE (papers.md §1–4): a one-layer draft head that predicts the target's next feature from
[feature ⊕ next-token embedding], its training pipeline, and the shipped head for the default model."""
