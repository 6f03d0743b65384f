"""Benchmarks: speed and detection figures measured side by side in one run, never in timed tests.

Run each from the repository root as a module (``tests.zoo`` then imports from there):

    python -m bench.mutations   planted mutations: structural diff and numeric check scores
    python -m bench.trace       specgraph's trace against each framework's own tracer
    python -m bench.align       alignment time on transformer graphs of up to 50k nodes
    python -m bench.numeric     the numeric check against plain forward + backward (time, memory)
    python -m bench._models     the benchmark-size BERT and ResNet-50 pairs that numeric uses

Each prints its figures line by line and its score last; ``--help`` lists its options.
"""
