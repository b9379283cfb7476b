"""Long Range Arena experiments: the task registry (`tasks`) and core registry (`cores`,
with the baselines' published settings in `official`), a run's settings (`config`), the
trainer (`train`), loaders for the official files (`data`) and offline generators of data
in their formats (`synthetic`, command line `generate`)."""
