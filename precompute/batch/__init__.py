"""The precompute batch job: its options, the runner (plan, execute, resume), the store writer, what a
store already holds (known_runs), the Ray backend and the stage timer."""
