"""Long Range Arena experiments: loaders for the official files (`data`), offline
generators for ListOps and Pathfinder (`generate`) and the paper's per-task settings
(`configs`)."""
