"""A byte-level LRU language model that writes: trained on the Python standard library's
own source by truncated backpropagation through time over long streams, scored in bits per
byte against unigram and bigram baselines, and sampled through the model's `step`.

`python -m experiments.lm train --out runs/lm`, then
`python -m experiments.lm sample --run runs/lm --prompt "def "`; see
`docs/guides/language-model.md`. The corpus (`corpus`), baselines (`baselines`), streams
(`streams`), model and programs (`model`), settings (`config`, `cli`), trainer (`train`),
sampling (`sample`) and curve (`plot`) are one module each; the checkpoints, signals, time
limit, metrics, errors and flag types are those every command shares (`experiments/runs`),
as the LRA trainer's are.
"""
