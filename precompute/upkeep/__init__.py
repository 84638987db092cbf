"""Store upkeep: removing, renaming and tagging runs (manage), merging shard stores, migrating old schemas."""
