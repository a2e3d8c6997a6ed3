"""Side-by-side benchmarks: specmesh against Hugging Face `generate` on the same prompts."""
